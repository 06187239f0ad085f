package records

import (
	"os"
	"strings"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/atomicfile"
)

// KeepDecision writes a stop decision next to its evidence, for the reaper
// (best effort: on a full filesystem even this may fail; the guardian's
// receipt carries the reason too).
func KeepDecision(path string, reason api.StopReason) {
	// Durable and whole, or not written: a full store leaves the old
	// decision (or none), never an empty file (issue 39, item 6). The stop
	// goes on either way: recording never prevents a kill (DESIGN.md, "The
	// store").
	_ = atomicfile.WriteFile(path, []byte(string(reason)+"\n"), 0o600)
}

// DropDecision removes a kept stop decision once the record is final: the
// record now says what happened (with the reason, or without one when the
// tree had ended by itself before the stop touched it).
func DropDecision(path string, rec *api.Command) {
	if rec != nil && rec.Final() {
		_ = os.Remove(path)
	}
}

// ReadDecision reads a kept stop decision ("" none).
func ReadDecision(path string) api.StopReason {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return api.StopReason(strings.TrimSpace(string(b)))
}
