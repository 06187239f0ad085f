package registry

import (
	"context"
	"database/sql"
	"fmt"
	"time"

	"github.com/habemus-papadum/hostfork/api"
)

// envEvents derives the events of an environment's change from old to
// next (old nil: inserted). It is pure, so the event log follows from the
// records: a change can't be recorded without its events.
func envEvents(old, next *api.Env, now time.Time) []api.Event {
	var evs []api.Event
	ev := func(k api.EventKind, at *time.Time) api.Event {
		e := api.Event{Kind: k, Env: next.ID, At: now}
		if at != nil {
			e.At = *at
		}
		return e
	}
	var was api.EnvState
	var wasReason api.StopReason
	if old != nil {
		was, wasReason = old.State, old.StopReason
	}
	if next.State == api.EnvActive && was != api.EnvActive && (was == "" || was == api.EnvCreating) {
		evs = append(evs, ev(api.EventEnvCreated, next.ActivatedAt))
	}
	if next.StopReason != "" && wasReason == "" {
		e := ev(api.EventEnvStopDecided, next.StopRequestedAt)
		e.Reason = next.StopReason
		evs = append(evs, e)
		if next.StopReason == api.ReasonDeadline {
			d := ev(api.EventDeadline, next.StopRequestedAt)
			d.Reason = api.ReasonDeadline
			evs = append(evs, d)
		}
	}
	if old != nil && old.DeadlineAt != nil && next.DeadlineAt != nil && !old.DeadlineAt.Equal(*next.DeadlineAt) {
		e := ev(api.EventEnvDeadlineMoved, nil)
		if n := len(next.DeadlineMoves); n > 0 {
			e.At = next.DeadlineMoves[n-1].At
		}
		e.Detail = "from " + old.DeadlineAt.UTC().Format(time.RFC3339Nano) + " to " + next.DeadlineAt.UTC().Format(time.RFC3339Nano)
		evs = append(evs, e)
	}
	if next.State != was {
		switch next.State {
		case api.EnvStopped:
			e := ev(api.EventEnvStopped, next.StoppedAt)
			e.Reason = next.StopReason
			evs = append(evs, e)
		case api.EnvFailed:
			e := ev(api.EventEnvFailed, next.StoppedAt)
			e.Detail = next.Error
			evs = append(evs, e)
		}
	}
	return evs
}

// commandEvents derives the events of a command's change (old nil:
// inserted).
func commandEvents(old, next *api.Command, now time.Time) []api.Event {
	var prev api.Command
	if old != nil {
		prev = *old
	}
	var evs []api.Event
	ev := func(k api.EventKind, at *time.Time) api.Event {
		e := api.Event{Kind: k, Env: next.Env, Command: next.ID, At: now}
		if at != nil {
			e.At = *at
		}
		return e
	}
	if next.State == api.CommandRunning && prev.State != api.CommandRunning && !prev.State.Final() && prev.State != api.CommandUnverified {
		evs = append(evs, ev(api.EventCommandStarted, next.StartedAt))
	}
	if next.StopReason != "" && prev.StopReason == "" {
		e := ev(api.EventCommandStopDecided, nil)
		e.Reason = next.StopReason
		evs = append(evs, e)
		switch next.StopReason {
		case api.ReasonDeadline, api.ReasonTimeout:
			d := ev(api.EventDeadline, nil)
			d.Reason = next.StopReason
			evs = append(evs, d)
		case api.ReasonIdle:
			d := ev(api.EventIdle, nil)
			d.Reason = api.ReasonIdle
			evs = append(evs, d)
		}
	}
	leaderDone := func(p api.Phase) bool { return p == api.PhaseExited || p == api.PhaseUnknown }
	if leaderDone(next.LeaderState) && !leaderDone(prev.LeaderState) && next.State != api.CommandFailed {
		e := ev(api.EventCommandLeaderExit, next.LeaderExitedAt)
		e.ExitCode, e.Signal = next.ExitCode, next.Signal
		if next.LeaderState == api.PhaseUnknown {
			e.Detail = "the leader's exit status was not observed"
		}
		evs = append(evs, e)
	}
	if next.OOM != nil && *next.OOM && (prev.OOM == nil || !*prev.OOM) {
		e := ev(api.EventOOM, next.TreeExitedAt)
		e.Detail = next.OOMEvidence
		evs = append(evs, e)
	}
	if next.State != prev.State {
		switch next.State {
		case api.CommandExited:
			e := ev(api.EventCommandTreeExit, next.TreeExitedAt)
			e.Reason = next.StopReason
			e.Detail = next.TreeEvidence
			evs = append(evs, e)
		case api.CommandFailed:
			if old != nil || next.Error != "" {
				e := ev(api.EventCommandFailed, next.TreeExitedAt)
				e.Detail = next.Error
				evs = append(evs, e)
			}
		case api.CommandUnverified:
			e := ev(api.EventCommandUnverified, nil)
			e.Detail = next.TreeEvidence
			evs = append(evs, e)
		}
	}
	return evs
}

// Events reads up to limit events with a sequence above since, in order
// (limit <= 0: all).
func (d *DB) Events(ctx context.Context, since int64, limit int) ([]api.Event, error) {
	q := "SELECT seq, recorded_at, at, kind, env_id, command_id, reason, exit_code, signal, detail FROM events WHERE seq > ? ORDER BY seq"
	args := []any{since}
	if limit > 0 {
		q += " LIMIT ?"
		args = append(args, limit)
	}
	rows, err := d.db.QueryContext(ctx, q, args...)
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	defer rows.Close()
	var out []api.Event
	for rows.Next() {
		var e api.Event
		var rec, at int64
		var code, sig sql.NullInt64
		if err := rows.Scan(&e.Seq, &rec, &at, &e.Kind, &e.Env, &e.Command, &e.Reason, &code, &sig, &e.Detail); err != nil {
			return nil, err
		}
		e.RecordedAt, e.At = time.Unix(0, rec).UTC(), time.Unix(0, at).UTC()
		e.ExitCode, e.Signal = nullInt(code), nullInt(sig)
		out = append(out, e)
	}
	return out, rows.Err()
}

// LastEvent is the highest sequence number written so far (0: none).
func (d *DB) LastEvent(ctx context.Context) (int64, error) {
	var n sql.NullInt64
	err := d.db.QueryRowContext(ctx, "SELECT max(seq) FROM events").Scan(&n)
	return n.Int64, err
}

// EventCounts is how many events of each kind and reason were ever
// recorded, in kind then reason order. The counts are written in the
// transaction of the events they count and nothing deletes them, so they
// never go down.
func (d *DB) EventCounts(ctx context.Context) ([]api.EventCount, error) {
	rows, err := d.db.QueryContext(ctx, "SELECT kind, reason, n FROM event_counts ORDER BY kind, reason")
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	defer rows.Close()
	var out []api.EventCount
	for rows.Next() {
		var c api.EventCount
		if err := rows.Scan(&c.Kind, &c.Reason, &c.Count); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}
