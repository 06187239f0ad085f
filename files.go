package hostfork

import (
	"context"
	"errors"
	"io"
	"iter"
	"os"
	"path"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/safefs"
	"github.com/habemus-papadum/hostfork/internal/watch"
)

// Files in and out of an environment (docs/decisions/101-files-in-and-out.md).
// A path names a file as the environment's commands see it: in an
// environment with a view it is resolved inside the view, from the root
// of the keeper's mount namespace, and never leaves it (".." and absolute
// symbolic links stop at the view's root; /proc magic links are refused);
// without a view it is a host path. Files are read and written with the
// caller's rights, which are the environment's user's (the store's owner
// runs its commands), and what is written is owned by it.
type (
	DirEntry  = api.DirEntry
	FileEvent = api.FileEvent
)

// MaxListing bounds the entries one ReadDir returns.
const MaxListing = 100000

func entry(e safefs.Entry) DirEntry {
	return DirEntry{Path: e.Path, Type: e.Type, Size: e.Size, Mode: e.Mode.String(), ModTime: e.ModTime.UTC(),
		UID: e.UID, GID: e.GID, Target: e.Target}
}

// root opens the view's root of the environment idPrefix names.
func (h *Host) root(ctx context.Context, envPrefix string) (*safefs.Root, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	id, err := h.resolveAs(ctx, envPrefix, "env", "is a command; name its environment", api.ErrNotFound)
	if err != nil {
		return nil, err
	}
	return h.e.ViewRoot(ctx, id)
}

// inView calls fn with the view's root of environment envPrefix, closed
// after, and adds the api sentinel to fn's error (filesErr).
func (h *Host) inView(ctx context.Context, envPrefix string, fn func(*safefs.Root) error) error {
	r, err := h.root(ctx, envPrefix)
	if err != nil {
		return err
	}
	defer r.Close()
	return filesErr(fn(r))
}

// ReadFile opens the file name of environment envPrefix for reading: a
// regular file (or a directory, which ReadDir lists). The caller closes
// it; it stays readable after the environment stops.
func (h *Host) ReadFile(ctx context.Context, envPrefix, name string) (f *os.File, err error) {
	err = h.inView(ctx, envPrefix, func(r *safefs.Root) (err error) {
		f, err = r.Open(name)
		return err
	})
	return f, err
}

// WriteFile replaces the file name of environment envPrefix with what src
// gives, streamed: into a new file beside it, renamed over name when
// complete (a reader sees the old content or the new; a symbolic link at
// name is replaced, not written through). perm 0 keeps an existing file's
// permissions (else 0644). The directory must exist (an error matching
// ErrNotFound names it and the fix otherwise). ctx is checked before the
// copy starts; src ends it.
func (h *Host) WriteFile(ctx context.Context, envPrefix, name string, src io.Reader, perm os.FileMode) (DirEntry, error) {
	var e safefs.Entry
	err := h.inView(ctx, envPrefix, func(r *safefs.Root) (err error) {
		e, err = r.WriteFile(name, src, perm)
		return err
	})
	return entry(e), err
}

// Mkdir creates the directory name of environment envPrefix (its parent
// must exist); an existing one matches ErrExists.
func (h *Host) Mkdir(ctx context.Context, envPrefix, name string, perm os.FileMode) error {
	return h.inView(ctx, envPrefix, func(r *safefs.Root) error { return r.Mkdir(name, perm) })
}

// Rename moves the file, link or directory oldName of environment
// envPrefix to newName, both inside the view (their directories must
// exist); an existing newName is replaced as rename(2) replaces it (a
// directory only by an empty one; else ErrExists). Symbolic links are
// moved as themselves, never followed.
func (h *Host) Rename(ctx context.Context, envPrefix, oldName, newName string) error {
	return h.inView(ctx, envPrefix, func(r *safefs.Root) error { return r.Rename(oldName, newName) })
}

// Remove removes the file or symbolic link name of environment envPrefix
// (the link, never its target), or the directory name with everything
// below it, never following a link and never descending into another
// mount (ErrInvalid, nothing below it touched). A missing name matches
// ErrNotFound.
func (h *Host) Remove(ctx context.Context, envPrefix, name string) error {
	return h.inView(ctx, envPrefix, func(r *safefs.Root) error { return r.Remove(name) })
}

// Stat describes the file name of environment envPrefix (following
// symbolic links inside the view); Path is its clean absolute name.
func (h *Host) Stat(ctx context.Context, envPrefix, name string) (DirEntry, error) {
	var e safefs.Entry
	err := h.inView(ctx, envPrefix, func(r *safefs.Root) (err error) {
		e, err = r.Stat(name)
		return err
	})
	return entry(e), err
}

// ReadDir lists the directory name of environment envPrefix to depth
// levels (1: its entries; 0 or less: the whole tree), parents before
// children, paths relative to name, symbolic links listed and not
// followed; at most MaxListing entries.
func (h *Host) ReadDir(ctx context.Context, envPrefix, name string, depth int) ([]DirEntry, error) {
	var es []safefs.Entry
	err := h.inView(ctx, envPrefix, func(r *safefs.Root) (err error) {
		es, err = r.ReadDir(name, depth, MaxListing)
		return err
	})
	if err != nil {
		return nil, err
	}
	out := make([]DirEntry, len(es))
	for i, e := range es {
		out[i] = entry(e)
	}
	return out, nil
}

// Watch reports the changes in the directory name of environment
// envPrefix (and with recursive, below it) until ctx ends, the directory
// is removed (a last "remove" event) or an error, which ends the sequence.
// Paths are absolute in the view.
func (h *Host) Watch(ctx context.Context, envPrefix, name string, recursive bool) iter.Seq2[FileEvent, error] {
	return func(yield func(FileEvent, error) bool) {
		r, err := h.root(ctx, envPrefix)
		if err != nil {
			yield(FileEvent{}, err)
			return
		}
		d, err := r.OpenPath(name, true)
		r.Close()
		if err != nil {
			yield(FileEvent{}, filesErr(err))
			return
		}
		defer d.Close()
		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		base := d.Name()
		err = watch.Dir(ctx, d, recursive, func(ev watch.Event) {
			if ctx.Err() == nil && !yield(FileEvent{Path: path.Join(base, ev.Path), Op: ev.Op, Dir: ev.Dir, At: time.Now().UTC()}, nil) {
				cancel()
			}
		})
		if err != nil && ctx.Err() == nil {
			yield(FileEvent{}, err)
		}
	}
}

// filesErr adds the api sentinel a files error means.
func filesErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, os.ErrNotExist):
		return wrapSentinel(err, api.ErrNotFound)
	case errors.Is(err, safefs.ErrExists):
		return wrapSentinel(err, api.ErrExists)
	case errors.Is(err, os.ErrPermission):
		return wrapSentinel(err, api.ErrForbidden)
	case errors.Is(err, safefs.ErrTooMany), errors.Is(err, safefs.ErrSymlink), errors.Is(err, safefs.ErrCrossesMount):
		return wrapSentinel(err, api.ErrInvalid)
	}
	return err
}

// Env's versions of the file calls.

// ReadFile is Host.ReadFile in this environment.
func (e *Env) ReadFile(ctx context.Context, name string) (*os.File, error) {
	return e.h.ReadFile(ctx, e.rec.ID, name)
}

// WriteFile is Host.WriteFile in this environment.
func (e *Env) WriteFile(ctx context.Context, name string, src io.Reader, perm os.FileMode) (DirEntry, error) {
	return e.h.WriteFile(ctx, e.rec.ID, name, src, perm)
}

// Mkdir is Host.Mkdir in this environment.
func (e *Env) Mkdir(ctx context.Context, name string, perm os.FileMode) error {
	return e.h.Mkdir(ctx, e.rec.ID, name, perm)
}

// Rename is Host.Rename in this environment.
func (e *Env) Rename(ctx context.Context, oldName, newName string) error {
	return e.h.Rename(ctx, e.rec.ID, oldName, newName)
}

// Remove is Host.Remove in this environment.
func (e *Env) Remove(ctx context.Context, name string) error {
	return e.h.Remove(ctx, e.rec.ID, name)
}

// Stat is Host.Stat in this environment.
func (e *Env) Stat(ctx context.Context, name string) (DirEntry, error) {
	return e.h.Stat(ctx, e.rec.ID, name)
}

// ReadDir is Host.ReadDir in this environment.
func (e *Env) ReadDir(ctx context.Context, name string, depth int) ([]DirEntry, error) {
	return e.h.ReadDir(ctx, e.rec.ID, name, depth)
}

// Watch is Host.Watch in this environment.
func (e *Env) Watch(ctx context.Context, name string, recursive bool) iter.Seq2[FileEvent, error] {
	return e.h.Watch(ctx, e.rec.ID, name, recursive)
}

// sentinelErr reads as its error and also matches an api sentinel.
type sentinelErr struct{ err, sentinel error }

func (e sentinelErr) Error() string   { return e.err.Error() }
func (e sentinelErr) Unwrap() []error { return []error{e.err, e.sentinel} }

func wrapSentinel(err, sentinel error) error { return sentinelErr{err, sentinel} }
