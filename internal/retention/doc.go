// Package retention applies retention to stopped environments (gc):
// private trees first, then evidence, each deletion checked against the
// store's own layout and the recorded identity. It also owns removing one
// tree, which the engine uses when a creation rolls back.
//
// Only the engine and the other store-wide passes import it.
package retention
