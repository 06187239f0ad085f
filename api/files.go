package api

import "time"

// DirEntry is one file of an environment's view, as Env.ReadDir and
// Env.Stat describe it (GET /v1/envs/{id}/dir, hostfork ls --json).
type DirEntry struct {
	// Path is relative to the listed directory (Stat: the absolute path in
	// the view).
	Path string `json:"path"`
	// Type is file, dir, symlink or other.
	Type    string    `json:"type"`
	Size    int64     `json:"size"`
	Mode    string    `json:"mode"` // as ls -l prints it, e.g. -rw-r--r--
	ModTime time.Time `json:"mod_time"`
	UID     uint32    `json:"uid"`
	GID     uint32    `json:"gid"`
	// Target is a symbolic link's target (never followed by a listing).
	Target string `json:"target,omitempty"`
}

// FileEvent is one change in an environment's view (Env.Watch, GET
// /v1/envs/{id}/watch, one NDJSON line each).
type FileEvent struct {
	// Path is the changed file's absolute path in the view.
	Path string `json:"path"`
	// Op is ready (the first event: the watch is in place; Path is the
	// watched directory), create, write, remove, rename (moved away),
	// attrib, or overflow (events were lost: read the directory again).
	Op  string    `json:"op"`
	Dir bool      `json:"dir,omitempty"`
	At  time.Time `json:"at"`
}
