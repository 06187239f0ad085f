package registry

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/habemus-papadum/hostfork/api"
)

// migrateV2Rows rewrites the schema-2 rows (one JSON document each) into
// the schema-3 tables, then gives those tables their final names.
func migrateV2Rows(ctx context.Context, tx *sql.Tx) error {
	type row struct {
		rev  int64
		data string
	}
	read := func(table string) ([]row, error) {
		rows, err := tx.QueryContext(ctx, "SELECT rev, data FROM "+table+" ORDER BY created_at, id")
		if err != nil {
			return nil, err
		}
		defer rows.Close()
		var out []row
		for rows.Next() {
			var r row
			if err := rows.Scan(&r.rev, &r.data); err != nil {
				return nil, err
			}
			out = append(out, r)
		}
		return out, rows.Err()
	}
	label := func(owner, id string, labels map[string]string) error {
		for k, v := range labels {
			if _, err := tx.ExecContext(ctx, "INSERT INTO labels (owner, id, key, value) VALUES (?, ?, ?, ?)", owner, id, k, v); err != nil {
				return err
			}
		}
		return nil
	}
	envs, err := read("envs")
	if err != nil {
		return err
	}
	for _, r := range envs {
		var o v2Env
		if err := json.Unmarshal([]byte(r.data), &o); err != nil {
			return fmt.Errorf("an environment record is corrupt (%v); keep a copy of registry.sqlite and remove that row by hand", err)
		}
		e := envFromV2(&o)
		e.Rev = r.rev
		vals, err := envValues(e)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, strings.Replace(envInsert, "INTO envs ", "INTO envs3 ", 1), vals...); err != nil {
			return err
		}
		if err := label("e", e.ID, e.Labels); err != nil {
			return err
		}
	}
	cmds, err := read("commands")
	if err != nil {
		return err
	}
	for _, r := range cmds {
		var o v2Command
		if err := json.Unmarshal([]byte(r.data), &o); err != nil {
			return fmt.Errorf("a command record is corrupt (%v); keep a copy of registry.sqlite and remove that row by hand", err)
		}
		c := commandFromV2(&o)
		c.Rev = r.rev
		if _, err := tx.ExecContext(ctx, commandInsertV3, commandValues(c)[:len(commandColumnsV3)]...); err != nil {
			return err
		}
		if err := label("c", c.ID, c.Labels); err != nil {
			return err
		}
	}
	for _, q := range []string{
		"DROP TABLE commands", "DROP TABLE envs",
		"ALTER TABLE envs3 RENAME TO envs", "ALTER TABLE commands3 RENAME TO commands",
	} {
		if _, err := tx.ExecContext(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", q, err)
		}
	}
	_, err = tx.ExecContext(ctx, indexesV3)
	return err
}

// commandColumnsV3 are the columns of schema 3's commands table: those
// after it come from later migrations.
var (
	commandColumnsV3 = commandColumns[:len(commandColumns)-3]
	commandInsertV3  = "INSERT INTO commands3 (" + strings.Join(commandColumnsV3, ", ") + ") VALUES (" + placeholders(len(commandColumnsV3)) + ")"
)

func idFromV2(i *v2Identity) *api.Identity {
	if i == nil {
		return nil
	}
	return &api.Identity{BootID: i.BootID, PID: i.PID, StartTime: i.StartTime}
}

func envFromV2(o *v2Env) *api.Env {
	e := &api.Env{
		ID: o.ID, State: api.EnvState(o.State), CreatedAt: o.CreatedAt, BootID: o.BootID,
		Purpose: o.Purpose, Labels: o.Labels, Tier: api.Tier(o.Tier),
		CgroupPath: o.CgroupPath, CgroupInode: o.CgroupInode, RunDir: o.RunDir,
		OwnerExit: o.OwnerExit, Owner: idFromV2(o.Owner), UntilStopped: o.UntilStopped,
		TTL: api.Duration(o.TTL), Grace: api.Duration(o.Grace), IdleTimeout: api.Duration(o.IdleTimeout),
		DeadlineAt: o.DeadlineAt, Spec: o.Spec, Keeper: idFromV2(o.Keeper), View: o.View,
		Limits: o.Limits, LimitEvidence: evidenceOf(durationsInEvidence(o.LimitEvidence)),
		Unit: o.Unit, ScopeMembership: o.ScopeMembership, ManagerResult: o.ManagerResult,
		StopReason: api.StopReason(o.StopReason), StopRequestedAt: o.StopRequestedAt, StoppedAt: o.StoppedAt,
		CleanupErrors: o.CleanupErrors, Error: o.Error,
		ActivatedMono: o.ActivatedMono, DeadlineMono: o.DeadlineMono,
	}
	for _, t := range o.Trees {
		e.Trees = append(e.Trees, api.Tree{Name: t.Name, Kind: t.Kind, Baseline: t.Baseline, Source: t.Source,
			HostPath: t.HostPath, WorkloadPath: t.WorkloadPath, Storage: t.Storage, State: t.State, Note: t.Note})
	}
	return e
}

func commandFromV2(o *v2Command) *api.Command {
	c := &api.Command{
		ID: o.ID, Env: o.EnvID, State: api.CommandState(o.State), CreatedAt: o.CreatedAt,
		Purpose: o.Purpose, Labels: o.Labels, Argv: o.Argv, Cwd: o.Cwd, Output: api.OutputMode(o.Output),
		Dir: o.Dir, StdoutPath: o.StdoutPath, StderrPath: o.StderrPath,
		EnvPolicy: o.EnvPolicy, EnvPolicyNote: o.EnvPolicyNote, Tier: api.Tier(o.Tier),
		Launcher: idFromV2(o.Launcher), CgroupPath: o.CgroupPath, CgroupInode: o.CgroupInode,
		Guardian: idFromV2(o.Guardian), ProofDev: o.ProofDev, ProofIno: o.ProofIno,
		Workload: idFromV2(o.Workload), StartedAt: o.StartedAt,
		ExitCode: o.ExitCode, Signal: o.Signal, LeaderState: api.Phase(o.LeaderState), LeaderExitedAt: o.LeaderExitedAt,
		TreeState: api.Phase(o.TreeState), TreeExitedAt: o.TreeExitedAt, TreeEvidence: o.TreeEvidence,
		StopReason: api.StopReason(o.StopReason), OOM: o.OOM, OOMEvidence: o.OOMEvidence, OOMBaseline: o.OOMBaseline,
		WorkloadKind: o.WorkloadKind, Admission: o.Admission, CleanupErrors: o.CleanupErrors, Error: o.Error,
	}
	if c.State == "unverified" {
		c.State = api.CommandUnverified
	}
	if len(o.Capture) > 0 {
		c.Capture = map[string]api.StreamCapture{}
		for _, k := range slices.Sorted(maps.Keys(o.Capture)) {
			v := o.Capture[k]
			c.Capture[k] = api.StreamCapture{State: v.State, Bytes: v.Bytes, Error: v.Error}
		}
	}
	return c
}

// durationsInEvidence rewrites a schema-2 limit evidence's CPU times from
// nanosecond counts (usage_ns, throttled_ns) to the duration strings of
// the project's convention (usage, throttled_time); anything it can't
// read is kept as it is.
func durationsInEvidence(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return raw
	}
	var ev map[string]json.RawMessage
	if json.Unmarshal(raw, &ev) != nil || ev["cpu"] == nil {
		return raw
	}
	var cpu map[string]json.RawMessage
	if json.Unmarshal(ev["cpu"], &cpu) != nil {
		return raw
	}
	for old, name := range map[string]string{"usage_ns": "usage", "throttled_ns": "throttled_time"} {
		v, ok := cpu[old]
		if !ok {
			continue
		}
		var n uint64
		if json.Unmarshal(v, &n) != nil {
			return raw
		}
		b, _ := json.Marshal(api.Duration(time.Duration(n)))
		cpu[name] = b
		delete(cpu, old)
	}
	b, err := json.Marshal(cpu)
	if err != nil {
		return raw
	}
	ev["cpu"] = b
	out, err := json.Marshal(ev)
	if err != nil {
		return raw
	}
	return out
}

// evidenceOf decodes a former version's limit evidence (nil when absent or
// unreadable: unknown, never zero).
func evidenceOf(raw json.RawMessage) *api.LimitsEvidence {
	if len(raw) == 0 {
		return nil
	}
	var ev api.LimitsEvidence
	if json.Unmarshal(raw, &ev) != nil {
		return nil
	}
	return &ev
}
