package registry

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Intent states.
const (
	IntentPending   = "pending"   // recorded before the OS mutation
	IntentCreated   = "created"   // the resource exists; Identity says which
	IntentReleased  = "released"  // the resource was removed
	IntentAbandoned = "abandoned" // the mutation never produced a resource
)

// Intent kinds.
const (
	KindDir      = "dir"       // a directory (run, command): evidence
	KindCgroup   = "cgroup"    // a cgroup2 group
	KindCgroupV1 = "cgroup-v1" // a cgroup v1 limit group
	KindScope    = "scope"     // a transient systemd scope (target systemd:<unit>)
	KindTree     = "tree"      // a private tree's allocation destination
	// KindFreeze is a fork's freeze of an environment's commands group
	// (target: "freeze:" and the group's path, FreezeTarget). Recorded before the freeze and settled after
	// the thaw; an open one is thawed by reap (decision 112).
	KindFreeze = "freeze"
)

// FreezeTarget is the target of a KindFreeze intent on the cgroup at
// path; FreezeGroup is its inverse. The prefix keeps it from reading as
// a path that the freeze made.
func FreezeTarget(path string) string { return "freeze:" + path }

// FreezeGroup is the cgroup a KindFreeze intent's target names.
func FreezeGroup(target string) string { return strings.TrimPrefix(target, "freeze:") }

// Intent is one allocation-ledger entry.
type Intent struct {
	ID        int64     `json:"id"`
	Rev       int64     `json:"rev"`
	EnvID     string    `json:"env"`
	CommandID string    `json:"command,omitempty"`
	Kind      string    `json:"kind"`
	Target    string    `json:"target"`
	State     string    `json:"state"`
	Identity  string    `json:"identity,omitempty"`
	Error     string    `json:"error,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// AddIntent records that in.Target is about to be created. in.ID is set
// when the batch commits.
func (b *Batch) AddIntent(in *Intent) {
	b.add(func(t *txn) error {
		res, err := t.tx.ExecContext(t.ctx, "INSERT INTO intents (env_id, command_id, rev, kind, target, state, created_at) VALUES (?, ?, 1, ?, ?, ?, ?)",
			in.EnvID, in.CommandID, in.Kind, in.Target, IntentPending, t.now.UnixNano())
		if err != nil {
			return fmt.Errorf("registry: recording intent for %s: %w", in.Target, err)
		}
		in.ID, err = res.LastInsertId()
		in.Rev, in.State, in.CreatedAt = 1, IntentPending, t.now
		return err
	})
}

// Fact is what was observed of one intent's target, before the batch.
type Fact struct {
	// Exists: the target is there (and, for a created intent, still the
	// recorded resource).
	Exists bool
	// Identity is the resource's identity record, for a pending intent
	// whose target now exists (it becomes created).
	Identity string
	// Error is recorded on the intent.
	Error string
}

// Settle is the one intent-settlement rule. Given what was observed of an
// intent's target, the intent moves: pending and missing → abandoned;
// created and missing → released; pending and existing → created, with the
// identity; created and existing → unchanged. It applies to the intent as
// the transaction finds it: an intent already settled by someone else is
// left alone.
func Settle(state string, f Fact) string {
	switch {
	case state == IntentPending && !f.Exists:
		return IntentAbandoned
	case state == IntentCreated && !f.Exists:
		return IntentReleased
	case state == IntentPending && f.Exists:
		return IntentCreated
	}
	return state
}

// SettleIntent applies Settle to one intent with the observed fact.
func (b *Batch) SettleIntent(id int64, f Fact) {
	b.add(func(t *txn) error {
		var state string
		if err := t.tx.QueryRowContext(t.ctx, "SELECT state FROM intents WHERE id = ?", id).Scan(&state); err != nil {
			return fmt.Errorf("registry: intent %d: %w", id, err)
		}
		if state != IntentPending && state != IntentCreated {
			return nil
		}
		next := Settle(state, f)
		if next == state && f.Error == "" {
			return nil
		}
		_, err := t.tx.ExecContext(t.ctx, "UPDATE intents SET rev = rev + 1, state = ?, identity = CASE WHEN ? = '' THEN identity ELSE ? END, error = ?, settled_at = ? WHERE id = ?",
			next, f.Identity, f.Identity, f.Error, t.now.UnixNano(), id)
		if err != nil {
			return fmt.Errorf("registry: settling intent %d: %w", id, err)
		}
		return nil
	})
}

// IntentFilter selects ledger entries; zero fields select all.
type IntentFilter struct {
	EnvID     string
	CommandID string
	Kind      string
	// Open selects pending and created intents only.
	Open bool
}

// Intents lists ledger entries, oldest first.
func (d *DB) Intents(ctx context.Context, f IntentFilter) ([]Intent, error) {
	q, args := "SELECT id, rev, env_id, command_id, kind, target, state, identity, error, created_at FROM intents WHERE 1=1", []any{}
	if f.EnvID != "" {
		q += " AND env_id = ?"
		args = append(args, f.EnvID)
	}
	if f.CommandID != "" {
		q += " AND command_id = ?"
		args = append(args, f.CommandID)
	}
	if f.Kind != "" {
		q += " AND kind = ?"
		args = append(args, f.Kind)
	}
	if f.Open {
		q += " AND state IN (?, ?)"
		args = append(args, IntentPending, IntentCreated)
	}
	q += " ORDER BY id"
	rows, err := d.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	defer rows.Close()
	var out []Intent
	for rows.Next() {
		var in Intent
		var created int64
		if err := rows.Scan(&in.ID, &in.Rev, &in.EnvID, &in.CommandID, &in.Kind, &in.Target, &in.State, &in.Identity, &in.Error, &created); err != nil {
			return nil, err
		}
		in.CreatedAt = time.Unix(0, created).UTC()
		out = append(out, in)
	}
	return out, rows.Err()
}
