// Package node is the hostfork worker of one node: the activities of package
// flow (Create, Exec, Stop, Export, Status, Logs) over the public hostfork
// library, a slot supplier that lets the node take placement tasks only while
// hostfork's admission has a free slot, and Run, which polls the shared
// queue and the node's own queue and reaps the store (docs/temporal.md).
//
// It is imported by the hostfork-temporal command and by programs that embed
// a worker. It uses only the root hostfork package, api and spec; everything
// it makes is owned by the worker process, so a worker that dies takes its
// environments with it (owner-exit stop), without a reaper.
package node
