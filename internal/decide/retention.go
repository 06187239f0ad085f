package decide

import (
	"fmt"
	"time"
)

// RetentionFacts is what gc gathered about one stopped environment.
type RetentionFacts struct {
	Now       time.Time
	StoppedAt *time.Time
	// KeepTrees and KeepEvidence are the retention that applies (per call,
	// else the environment's spec, else the store's configuration).
	KeepTrees, KeepEvidence time.Duration
	// Force discards trees and evidence now, whatever the retention.
	Force bool
	// Unfinished names a command whose tree is not proven finished.
	Unfinished string
	Trees      []TreeFacts
}

// TreeFacts is one allocated tree of the environment.
type TreeFacts struct {
	Name string
	// Hold says why it must be kept although its retention passed (an
	// unfinished export, a tree built on it); "" when none.
	Hold string
}

// Item is one decision about one thing: delete it, or hold it with the
// reason.
type Item struct {
	What   string // "tree NAME" | "evidence" | "environment"
	Tree   string
	Delete bool
	Reason string
}

// Retention decides what gc deletes of one environment: trees whose
// retention passed (unless held), then its evidence once no tree remains
// and its evidence retention passed. Live or unverified commands keep
// everything.
func Retention(f RetentionFacts) []Item {
	if f.StoppedAt == nil {
		return []Item{{What: "environment", Reason: "no confirmed stop time recorded"}}
	}
	if f.Unfinished != "" {
		return []Item{{What: "evidence", Reason: f.Unfinished}}
	}
	age := f.Now.Sub(*f.StoppedAt)
	var out []Item
	remaining := 0
	for _, t := range f.Trees {
		it := Item{What: "tree " + t.Name, Tree: t.Name}
		switch {
		case !f.Force && age < f.KeepTrees:
			remaining++
			continue // not due: neither deleted nor reported
		case t.Hold != "":
			it.Reason = t.Hold
			remaining++
		default:
			it.Delete = true
			it.Reason = fmt.Sprintf("retention %s passed (stopped %s ago)", f.KeepTrees, age.Round(time.Second))
			if f.Force {
				it.Reason = "forced"
			}
		}
		out = append(out, it)
	}
	if !f.Force && age < f.KeepEvidence {
		return out
	}
	ev := Item{What: "evidence"}
	switch {
	case remaining > 0:
		ev.Reason = fmt.Sprintf("%d tree(s) still retained; evidence is kept while they are", remaining)
	default:
		ev.Delete = true
		ev.Reason = fmt.Sprintf("retention %s passed (stopped %s ago)", f.KeepEvidence, age.Round(time.Second))
		if f.Force {
			ev.Reason = "forced"
		}
	}
	return append(out, ev)
}
