package server

import (
	"encoding/json"
	"net/http"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/client"
	"github.com/habemus-papadum/hostfork/spec"
)

// route is one endpoint: what the mux routes and what the OpenAPI
// document says, from the same table so they can't drift.
type route struct {
	method, path string
	summary      string
	query        []param
	// body is a value of the request body's type (nil: no body).
	body any
	// status is the success status; resp a value of the answer's type
	// (nil with a raw content type).
	status      int
	resp        any
	contentType string // "" = application/json
	// handle answers a value (JSON, with status) or an error; nil, nil
	// when it wrote the answer itself (a stream).
	handle func(w http.ResponseWriter, r *http.Request) (any, error)
}

// param is one query parameter.
type param struct {
	name, typ, desc string
	repeat          bool
}

var (
	pLabel   = param{name: "label", typ: "string", desc: "label selector term K=V or K; repeatable, all must match", repeat: true}
	pGrace   = param{name: "grace", typ: "string", desc: "termination grace after SIGTERM, a duration such as 2s (default: the environment's)"}
	pAbandon = param{name: "abandon", typ: "boolean", desc: "1: release an unverified tree without proof of its exit (recorded)"}
	pShowEnv = param{name: "show_env", typ: "boolean", desc: "1: show the values of the spec's explicit environment variables (redacted by default)"}
	pReason  = param{name: "reason", typ: "string", desc: "the stop reason to record: user (default) or owner-exit (a client ending what its foreground command left behind, as hostfork run and exec do)"}
)

func (s *Server) table() []route {
	return []route{
		{method: "GET", path: "/v1/_ping", summary: "Check that the server answers", status: 200, resp: client.Ping{}, handle: s.ping},
		{method: "GET", path: "/v1/version", summary: "The server's version and build provenance (as hostfork version --json)", status: 200, resp: client.VersionInfo{}, handle: s.version},
		{method: "GET", path: "/v1/openapi.json", summary: "This document", status: 200, resp: map[string]any{}, handle: s.openapi},
		{method: "GET", path: "/v1/resolve/{id}", summary: "What an id or unique prefix names: an environment or a command, and its whole id", status: 200, resp: client.Resolved{}, handle: s.resolve},
		{method: "POST", path: "/v1/plan", summary: "Plan an environment from a spec file's JSON, creating nothing (as hostfork plan --json)", body: spec.Environment{}, status: 200, resp: spec.Plan{}, handle: s.plan},

		{method: "GET", path: "/v1/envs", summary: "List environments with their commands, oldest first", status: 200, resp: []api.Env{},
			query: []param{pLabel, {name: "state", typ: "string", desc: "environment state: creating, active, stopping, stopped or failed; repeatable", repeat: true},
				{name: "active", typ: "boolean", desc: "1: only environments that are not final"},
				{name: "commands", typ: "boolean", desc: "0: leave out each environment's commands (default 1: with them)"}, pShowEnv}, handle: s.listEnvs},
		{method: "POST", path: "/v1/envs", summary: "Create an environment from a spec file's JSON; it needs lifetime.max_runtime or lifetime.until_stopped and outlives the server (owner_exit detach)",
			query: []param{pShowEnv}, body: spec.Environment{}, status: 201, resp: api.Env{}, handle: s.createEnv},
		{method: "GET", path: "/v1/envs/{id}", summary: "One environment (id or unique prefix) with its commands", query: []param{pShowEnv}, status: 200, resp: api.Env{}, handle: s.getEnv},
		{method: "POST", path: "/v1/envs/{id}/stop", summary: "Stop an environment: every command tree, then the environment (deletes no file)", query: []param{pGrace, pAbandon, pReason, pShowEnv}, status: 200, resp: api.Env{}, handle: s.stopEnv},
		{method: "POST", path: "/v1/envs/{id}/deadline", summary: "Move the environment's deadline later or earlier (ttl from now, or until an RFC 3339 instant), within the store's lifetime.max; every enforcer holds it before the answer", body: api.DeadlineRequest{}, status: 200, resp: api.Env{}, handle: s.extendEnv},
		{method: "GET", path: "/v1/envs/{id}/files", summary: "Stream a file of the environment, its path resolved inside its view (never leaving it)", query: []param{pPath}, status: 200, contentType: "application/octet-stream", handle: s.readFile},
		{method: "PUT", path: "/v1/envs/{id}/files", summary: "Write a file of the environment from the raw body (replacing it whole; a symbolic link there is replaced, not written through); its directory must exist", query: []param{pPath, pMode}, status: 200, resp: api.DirEntry{}, handle: s.writeFile},
		{method: "GET", path: "/v1/envs/{id}/stat", summary: "Describe a file of the environment", query: []param{pPath}, status: 200, resp: api.DirEntry{}, handle: s.stat},
		{method: "GET", path: "/v1/envs/{id}/dir", summary: "List a directory of the environment (links listed, not followed)", query: []param{pPath, pDepth}, status: 200, resp: []api.DirEntry{}, handle: s.readDir},
		{method: "PUT", path: "/v1/envs/{id}/dir", summary: "Create a directory of the environment (its parent must exist)", query: []param{pPath, pMode}, status: 201, resp: api.DirEntry{}, handle: s.mkdir},
		{method: "GET", path: "/v1/envs/{id}/watch", summary: "Stream the changes in a directory of the environment as NDJSON (one api.FileEvent per line)", query: []param{pPath, pRecursive}, status: 200, resp: api.FileEvent{}, contentType: "application/x-ndjson", handle: s.watchFiles},
		{method: "POST", path: "/v1/envs/{id}/export", summary: "Copy one of the environment's trees to a new destination", body: client.ExportRequest{}, status: 200, resp: api.ExportResult{}, handle: s.exportEnv},
		{method: "POST", path: "/v1/envs/{id}/fork", summary: "Make count environments whose trees start as this one's at one instant (its commands frozen while the trees are taken; processes are not cloned); the children are detached",
			query: []param{pShowEnv}, body: client.ForkRequest{}, status: 201, resp: []api.Env{}, handle: s.forkEnv},
		{method: "POST", path: "/v1/runs", summary: "Create an environment with a first command (output in files) that stops when the command's tree has exited, or at its deadline (as hostfork run --detach)",
			query: []param{pShowEnv}, body: runBody{}, status: 201, resp: api.Env{}, handle: s.run},
		{method: "POST", path: "/v1/envs/{id}/commands", summary: "Start a detached command in the environment (output in files)", body: client.CommandRequest{}, status: 201, resp: api.Command{}, handle: s.startCommand},

		{method: "GET", path: "/v1/commands", summary: "List commands, oldest first", status: 200, resp: []api.Command{},
			query: []param{{name: "env", typ: "string", desc: "only the commands of this environment (id or unique prefix)"}, pLabel,
				{name: "state", typ: "string", desc: "record state (record_state): reserved, running, exited, failed or unverified; repeatable", repeat: true},
				{name: "live", typ: "boolean", desc: "1: only commands whose tree is alive or unverified (hostfork ps)"},
				{name: "brief", typ: "boolean", desc: "1: final commands carry only what a listing prints (CommandFilter.Brief); the other fields are zero"}}, handle: s.listCommands},
		{method: "GET", path: "/v1/commands/{id}", summary: "One command's record (id or unique prefix)", status: 200, resp: api.Command{}, handle: s.getCommand},
		{method: "GET", path: "/v1/commands/{id}/wait", summary: "Block until the leader exited (condition=leader) or the tree is gone and recorded (condition=tree, the default); or, with for or stalled, until the output matches or stalls (or the tree ends first). The answer is the command's record with why the wait returned (reason leader, tree, match, stalled or ended; match; quiet_since)",
			query: []param{{name: "condition", typ: "string", desc: "leader or tree (default tree) for a plain wait; a wait for output (for, stalled) ends with the tree: only tree goes with it"},
				{name: "for", typ: "string", desc: "a regular expression (Go RE2 syntax) a line of the output must match; the answer's match gives the stream, the byte offset and the line"},
				{name: "stream", typ: "string", desc: "with for: search only stdout or stderr (default both)"},
				{name: "since", typ: "integer", desc: "with for and stream: the byte offset to search from (a previous match's next)"},
				{name: "stalled", typ: "string", desc: "return once the command has written no output for this long, e.g. 5s"},
				{name: "timeout", typ: "string", desc: "bound the wait, e.g. 2m: past it the answer is 504 with cause timed_out (exit code 115); the command runs on"}},
			status: 200, resp: api.WaitOutcome{}, handle: s.waitCommand},
		{method: "POST", path: "/v1/commands/{id}/signal", summary: "Send a signal to the command's leader process", body: client.SignalRequest{}, status: 200, resp: api.Command{}, handle: s.signalCommand},
		{method: "POST", path: "/v1/commands/{id}/stop", summary: "Stop the command's whole tree", query: []param{pGrace, pAbandon, pReason}, status: 200, resp: api.Command{}, handle: s.stopCommand},
		{method: "GET", path: "/v1/commands/{id}/attach", summary: "Attach to the command's session (a terminal or a stdin pipe): a WebSocket (RFC 6455) whose binary messages are the session's frames, a type byte then the payload (docs/sessions.md): Welcome, the replay and live Output, Exit; the client sends Data, Resize, EOF. The guardian holds the session: it outlives the connection and the server",
			query:  []param{{name: "replay", typ: "integer", desc: "bytes of the latest output to send first (default 65536)"}, {name: "no_stdin", typ: "boolean", desc: "1: watch only (Data frames are refused)"}},
			status: 101, contentType: "application/octet-stream", handle: s.attach},
		{method: "POST", path: "/v1/commands/{id}/input", summary: "Type into the command's terminal or write to its stdin pipe, without attaching; eof closes the input (^D on a terminal). Answers once the guardian has written it", body: client.InputRequest{}, status: 200, resp: client.InputResult{}, handle: s.input},
		{method: "POST", path: "/v1/commands/{id}/resize", summary: "Resize the command's terminal (the workload gets SIGWINCH)", body: client.ResizeRequest{}, status: 200, resp: client.ResizeRequest{}, handle: s.resize},
		{method: "GET", path: "/v1/commands/{id}/logs", summary: "Raw output bytes from a byte offset, optionally followed until the tree exits",
			query: []param{{name: "stream", typ: "string", desc: "stdout (default) or stderr"}, {name: "offset", typ: "integer", desc: "byte offset to start at"},
				{name: "tail", typ: "integer", desc: "start at the last N lines instead (the Hostfork-Log-Offset header says at which offset)"},
				{name: "follow", typ: "boolean", desc: "1: keep streaming as the command writes, until its tree has exited"}},
			status: 200, contentType: "application/octet-stream", handle: s.logs},

		{method: "GET", path: "/v1/events", summary: "The event log after a sequence, as NDJSON (one api.Event per line), following by default",
			query: []param{{name: "since", typ: "integer", desc: "the last sequence seen (default 0: from the start)"},
				{name: "follow", typ: "boolean", desc: "0: end after the events that exist; 1 (default): keep streaming until the client leaves"}},
			status: 200, resp: api.Event{}, contentType: "application/x-ndjson", handle: s.events},

		{method: "GET", path: "/v1/capacity", summary: "Admission: slots, reservations, live agent workloads", status: 200, resp: api.CapacityReport{}, handle: s.capacity},
		{method: "POST", path: "/v1/pause", summary: "Pause admission of new agent workloads", status: 200, resp: client.PauseState{}, handle: s.pause(true)},
		{method: "POST", path: "/v1/resume", summary: "Resume admission", status: 200, resp: client.PauseState{}, handle: s.pause(false)},
		{method: "POST", path: "/v1/reap", summary: "Reconcile the ledger with what exists (idempotent)", status: 200, resp: api.ReapReport{}, handle: s.reap},
		{method: "GET", path: "/v1/usage", summary: "The store's inventory", status: 200, resp: api.Usage{}, handle: s.usage},
		{method: "GET", path: "/v1/usage/btrfs", summary: "Each Btrfs tree's exclusive and shared bytes, measured now (slow; as hostfork usage --btrfs-sizes)", status: 200, resp: []api.BtrfsSize{}, handle: s.btrfsSizes},
		{method: "POST", path: "/v1/gc", summary: "Apply retention: delete the trees and evidence of stopped environments that retention allows (as hostfork gc)", body: client.GCRequest{}, status: 200, resp: api.GCReport{}, handle: s.gc},
		{method: "GET", path: "/v1/baselines", summary: "The registered baselines", status: 200, resp: []api.Baseline{}, handle: s.baselines},
		{method: "POST", path: "/v1/baselines", summary: "Register a prepared directory or Btrfs subvolume of the server's host as a baseline (it only looks at the path)", body: client.BaselineRequest{}, status: 201, resp: api.Baseline{}, handle: s.addBaseline},
		{method: "DELETE", path: "/v1/baselines/{name}", summary: "Unregister a baseline (its files are not touched)", status: 200, resp: client.Removed{}, handle: s.removeBaseline},
		{method: "GET", path: "/v1/doctor", summary: "The host's doctor report (as hostfork doctor --json; read-only)", status: 200, resp: json.RawMessage{}, handle: s.doctor},

		{method: "GET", path: "/metrics", summary: "Prometheus metrics, read from the kernel's counters at scrape time", status: 200, contentType: "text/plain; version=0.0.4", handle: s.metrics},
	}
}
