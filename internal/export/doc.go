// Package export copies an environment's tree out of the store, labelled
// with what it is (complete, live, partial, failed), and settles exports a
// crash interrupted (Sweep, called by the reaper).
//
// Only the engine and the other store-wide passes import it.
package export
