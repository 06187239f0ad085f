// Package flow is the Temporal side of hostfork on many nodes: the task
// queues, the activities' names and their inputs and outputs (the contract a
// node worker serves), and RunInEnvironment, a workflow that runs commands in
// one environment and starts again on another node when its node is lost
// (docs/temporal.md).
//
// It is pure data and workflow code: it imports the Temporal SDK and
// hostfork's api and spec packages (plain types), never the hostfork engine,
// so a client that only starts workflows, or a workflow of its own that calls
// the activities by name, can import it without hostfork's C helpers or its
// SQLite driver. Package node implements the activities over the library.
package flow
