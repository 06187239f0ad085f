// Package usage measures a store: environments, trees by kind, pools,
// logs, exports, the cleanup backlog, and Btrfs extents on request. It
// changes nothing; environments are read as every reader reads them,
// through the engine's Reader.
//
// Only the engine imports it.
package usage
