package registry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/mattn/go-sqlite3"

	"github.com/habemus-papadum/hostfork/api"
)

// Batch is a set of changes committed together in one transaction, with
// the preconditions they rest on. Build it from facts gathered beforehand;
// it runs no caller code inside the transaction.
type Batch struct {
	ops []func(*txn) error
	// Now is the time recorded for the batch's events and intents (the
	// commit's wall clock when zero).
	Now time.Time
}

// txn is one write transaction in progress.
type txn struct {
	ctx context.Context
	tx  *sql.Tx
	now time.Time
}

func (b *Batch) add(op func(*txn) error) { b.ops = append(b.ops, op) }

// Empty reports whether the batch changes nothing.
func (b *Batch) Empty() bool { return len(b.ops) == 0 }

// Commit applies the batch in one IMMEDIATE transaction, durable when it
// returns (synchronous=FULL: every commit syncs the WAL, so no event
// number a reader saw can be taken back by a power loss). A failed
// precondition or a stale revision is ErrConflict; nothing is applied then.
// On success, the revisions of the records given to UpdateEnv and
// UpdateCommand are the new ones.
func (d *DB) Commit(ctx context.Context, b *Batch) error {
	if b.Empty() {
		return nil
	}
	if d.full {
		return fmt.Errorf("registry %s: %w", d.path, ErrFull)
	}
	// SQLite admits one writer at a time anyway. Writers queue here
	// instead of inside BEGIN IMMEDIATE, where each would sleep in
	// SQLite's busy-handler backoff (1, 2, 5, 10 … up to 100 ms a try)
	// while the lock sits free: those of this process on a channel, and
	// every process's on the writers' lock of registry.lock, where the
	// kernel wakes the next the moment the holder lets go. Writers that
	// don't take it (a migration, a checkpoint, an older hostfork) still
	// meet SQLite's own lock; none of them waits for this one while
	// holding SQLite's, so the order can't deadlock.
	unlock, err := d.queueWriter(ctx)
	if err != nil {
		return err
	}
	defer unlock()
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("registry: %w", classify(err))
	}
	now := b.Now
	if now.IsZero() {
		now = time.Now().UTC()
	}
	t := &txn{ctx: ctx, tx: tx, now: now}
	for _, op := range b.ops {
		if err := op(t); err != nil {
			tx.Rollback()
			return classify(err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("registry commit: %w", classify(err))
	}
	return nil
}

// InsertEnv adds a new environment at revision 1 (e.Rev is set), with its
// labels.
func (b *Batch) InsertEnv(e *api.Env) {
	b.add(func(t *txn) error {
		e.Rev = 1
		vals, err := envValues(e)
		if err != nil {
			return err
		}
		if _, err := t.tx.ExecContext(t.ctx, envInsert, vals...); err != nil {
			if isUnique(err) {
				return fmt.Errorf("environment %s: %w", e.ID, api.ErrExists)
			}
			return fmt.Errorf("registry insert environment %s: %w", e.ID, err)
		}
		if err := t.putLabels("e", e.ID, e.Labels); err != nil {
			return err
		}
		return t.events(envEvents(nil, e, t.now))
	})
}

// UpdateEnv writes next if old.Rev is still current (compare-and-set) and
// records the events of the change from old to next. next.Rev becomes the
// new revision.
func (b *Batch) UpdateEnv(old, next *api.Env) {
	b.add(func(t *txn) error {
		if old.ID != next.ID {
			return fmt.Errorf("registry: UpdateEnv of %s with a record of %s", old.ID, next.ID)
		}
		doc, err := envDoc(next)
		if err != nil {
			return err
		}
		res, err := t.tx.ExecContext(t.ctx, envUpdate, string(next.State), next.BootID, nsOf(next.DeadlineAt), int64(next.ActivatedMono), int64(next.DeadlineMono), doc, next.ID, old.Rev)
		if err != nil {
			return fmt.Errorf("registry update environment %s: %w", next.ID, err)
		}
		if err := t.casResult(res, "envs", next.ID, old.Rev); err != nil {
			return err
		}
		next.Rev = old.Rev + 1
		if !labelsEqual(old.Labels, next.Labels) {
			if err := t.putLabels("e", next.ID, next.Labels); err != nil {
				return err
			}
		}
		return t.events(envEvents(old, next, t.now))
	})
}

// InsertCommand adds a new command at revision 1 (c.Rev is set), with its
// labels.
func (b *Batch) InsertCommand(c *api.Command) {
	b.add(func(t *txn) error {
		c.Rev = 1
		if _, err := t.tx.ExecContext(t.ctx, commandInsert, commandValues(c)...); err != nil {
			if isUnique(err) {
				return fmt.Errorf("command %s: %w", c.ID, api.ErrExists)
			}
			return fmt.Errorf("registry insert command %s: %w", c.ID, err)
		}
		if err := t.putLabels("c", c.ID, c.Labels); err != nil {
			return err
		}
		return t.events(commandEvents(nil, c, t.now))
	})
}

// UpdateCommand writes next if old.Rev is still current and records the
// events of the change. next.Rev becomes the new revision.
func (b *Batch) UpdateCommand(old, next *api.Command) {
	b.add(func(t *txn) error {
		if old.ID != next.ID {
			return fmt.Errorf("registry: UpdateCommand of %s with a record of %s", old.ID, next.ID)
		}
		args := append([]any{string(next.State)}, commandTail(next)...)
		args = append(args, next.ID, old.Rev)
		res, err := t.tx.ExecContext(t.ctx, commandUpdate, args...)
		if err != nil {
			return fmt.Errorf("registry update command %s: %w", next.ID, err)
		}
		if err := t.casResult(res, "commands", next.ID, old.Rev); err != nil {
			return err
		}
		next.Rev = old.Rev + 1
		if !labelsEqual(old.Labels, next.Labels) {
			if err := t.putLabels("c", next.ID, next.Labels); err != nil {
				return err
			}
		}
		return t.events(commandEvents(old, next, t.now))
	})
}

// RequireEnv is a precondition: the environment's state is one of states
// and, when beforeMono is not zero, its deadline (on boot boot) minus its
// grace has not passed at beforeMono. A launch gate uses it: a stop that
// began since the reservation revokes the gate.
func (b *Batch) RequireEnv(id string, states []api.EnvState, boot string, nowMono time.Duration) {
	b.add(func(t *txn) error {
		var state, bootID string
		var dl int64
		var data string
		err := t.tx.QueryRowContext(t.ctx, "SELECT state, boot_id, deadline_mono, data FROM envs WHERE id = ?", id).Scan(&state, &bootID, &dl, &data)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("environment %s: %w", id, ErrNotFound)
		}
		if err != nil {
			return fmt.Errorf("registry: %w", err)
		}
		if !slices.Contains(states, api.EnvState(state)) {
			return refused{fmt.Errorf("environment %s is %s: %w", id, state, api.ErrEnvNotActive)}
		}
		if nowMono > 0 && dl > 0 && bootID == boot {
			var g struct {
				Grace api.Duration `json:"grace"`
			}
			_ = fromJSON(data, &g)
			if nowMono >= time.Duration(dl)-g.Grace.D() {
				return refused{fmt.Errorf("environment %s has reached its deadline: %w", id, api.ErrEnvNotActive)}
			}
		}
		return nil
	})
}

// refused is a precondition that no longer holds: it reads as its reason
// and also tests as ErrConflict.
type refused struct{ error }

func (r refused) Unwrap() []error { return []error{r.error, ErrConflict} }

// Event records an event that no record change implies (a reap action, a
// gc deletion).
func (b *Batch) Event(ev api.Event) {
	b.add(func(t *txn) error { return t.events([]api.Event{ev}) })
}

// SetSetting writes a store-wide setting.
func (b *Batch) SetSetting(key, value string) {
	b.add(func(t *txn) error {
		_, err := t.tx.ExecContext(t.ctx, "INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value", key, value)
		return err
	})
}

// InsertBaseline registers a baseline; the name must be new.
func (b *Batch) InsertBaseline(bl *api.Baseline) {
	b.add(func(t *txn) error {
		bl.Rev = 1
		data, err := jsonMarshal(bl)
		if err != nil {
			return err
		}
		_, err = t.tx.ExecContext(t.ctx, "INSERT INTO baselines (name, rev, state, created_at, data) VALUES (?, 1, 'registered', ?, ?)", bl.Name, bl.CreatedAt.UnixNano(), data)
		if err != nil {
			if isUnique(err) {
				return fmt.Errorf("baseline %q is already registered (remove it first with 'hostfork baseline rm %s'): %w", bl.Name, bl.Name, api.ErrExists)
			}
			return fmt.Errorf("registry: %w", err)
		}
		return nil
	})
}

// DeleteBaseline unregisters a baseline (its files are never touched).
func (b *Batch) DeleteBaseline(name string) {
	b.add(func(t *txn) error {
		res, err := t.tx.ExecContext(t.ctx, "DELETE FROM baselines WHERE name = ?", name)
		if err != nil {
			return fmt.Errorf("registry: %w", err)
		}
		if n, _ := res.RowsAffected(); n == 0 {
			return fmt.Errorf("no baseline named %q: %w", name, ErrNotFound)
		}
		return nil
	})
}

// DeleteEnv removes an environment's rows (the environment, its commands,
// their labels and intents; events stay). Retention calls it after the
// evidence files are gone; it refuses while any intent still names an
// existing resource.
func (b *Batch) DeleteEnv(id string) {
	b.add(func(t *txn) error {
		var n int
		if err := t.tx.QueryRowContext(t.ctx, "SELECT count(*) FROM intents WHERE env_id = ? AND state IN (?, ?)", id, IntentPending, IntentCreated).Scan(&n); err != nil {
			return fmt.Errorf("registry: %w", err)
		}
		if n > 0 {
			return fmt.Errorf("environment %s still has %d unsettled resources on the ledger: %w", id, n, ErrConflict)
		}
		for _, q := range []string{
			"DELETE FROM labels WHERE owner = 'c' AND id IN (SELECT id FROM commands WHERE env_id = ?)",
			"DELETE FROM labels WHERE owner = 'e' AND id = ?",
			"DELETE FROM intents WHERE env_id = ?",
			// Its events go with it: the event log is bounded by
			// retention (event_counts keeps the counters).
			"DELETE FROM events WHERE env_id = ?",
			"DELETE FROM commands WHERE env_id = ?",
			"DELETE FROM envs WHERE id = ?",
		} {
			if _, err := t.tx.ExecContext(t.ctx, q, id); err != nil {
				return fmt.Errorf("registry: %w", err)
			}
		}
		return nil
	})
}

func (t *txn) casResult(res sql.Result, table, id string, rev int64) error {
	n, _ := res.RowsAffected()
	if n > 0 {
		return nil
	}
	var cur int64
	err := t.tx.QueryRowContext(t.ctx, "SELECT rev FROM "+table+" WHERE id = ?", id).Scan(&cur)
	if errors.Is(err, sql.ErrNoRows) {
		return fmt.Errorf("%s %s: %w", strings.TrimSuffix(table, "s"), id, ErrNotFound)
	}
	return fmt.Errorf("%s %s at revision %d, now %d: %w", strings.TrimSuffix(table, "s"), id, rev, cur, ErrConflict)
}

func (t *txn) putLabels(owner, id string, labels map[string]string) error {
	if _, err := t.tx.ExecContext(t.ctx, "DELETE FROM labels WHERE owner = ? AND id = ?", owner, id); err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	for k, v := range labels {
		if _, err := t.tx.ExecContext(t.ctx, "INSERT INTO labels (owner, id, key, value) VALUES (?, ?, ?, ?)", owner, id, k, v); err != nil {
			return fmt.Errorf("registry: %w", err)
		}
	}
	return nil
}

func (t *txn) events(evs []api.Event) error {
	for _, ev := range evs {
		at := ev.At
		if at.IsZero() {
			at = t.now
		}
		_, err := t.tx.ExecContext(t.ctx, "INSERT INTO events (recorded_at, at, kind, env_id, command_id, reason, exit_code, signal, detail) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
			t.now.UnixNano(), at.UnixNano(), string(ev.Kind), ev.Env, ev.Command, string(ev.Reason), intOf(ev.ExitCode), intOf(ev.Signal), ev.Detail)
		if err != nil {
			return fmt.Errorf("registry: recording event %s: %w", ev.Kind, err)
		}
		if _, err := t.tx.ExecContext(t.ctx, "INSERT INTO event_counts (kind, reason, n) VALUES (?, ?, 1) ON CONFLICT (kind, reason) DO UPDATE SET n = n + 1",
			string(ev.Kind), string(ev.Reason)); err != nil {
			return fmt.Errorf("registry: counting event %s: %w", ev.Kind, err)
		}
	}
	return nil
}

func labelsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// isUnique reports whether err is SQLite's refusal of a duplicate key:
// a primary key or a UNIQUE index.
func isUnique(err error) bool {
	var se sqlite3.Error
	return errors.As(err, &se) && (se.ExtendedCode == sqlite3.ErrConstraintUnique || se.ExtendedCode == sqlite3.ErrConstraintPrimaryKey)
}
