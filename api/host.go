package api

// HostEnv is the environment variable that names a running 'hostfork
// serve' (unix:///path/api.sock): the CLI runs its verbs through that
// server when it is set (as with --host), and package client's New("")
// connects to it.
const HostEnv = "HOSTFORK_HOST"
