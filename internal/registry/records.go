package registry

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"
)

// Identity is a recorded process identity (boot id, PID, start time).
type Identity struct {
	BootID    string `json:"boot_id"`
	PID       int    `json:"pid"`
	StartTime uint64 `json:"start_time"`
}

// Env states.
const (
	EnvCreating = "creating" // reserved; OS resources may be half-made
	EnvActive   = "active"
	EnvStopping = "stopping"
	EnvStopped  = "stopped" // execution stop confirmed; files remain
	EnvFailed   = "failed"  // creation failed; intents say what exists
)

// Env is an environment's record.
type Env struct {
	ID        string            `json:"id"`
	Rev       int64             `json:"rev"`
	State     string            `json:"state"`
	CreatedAt time.Time         `json:"created_at"`
	BootID    string            `json:"boot_id"`
	Purpose   string            `json:"purpose,omitempty"`
	Labels    map[string]string `json:"labels,omitempty"`
	// Tier is the ownership tier: cgroup2 or subreaper.
	Tier        string `json:"tier"`
	CgroupPath  string `json:"cgroup_path,omitempty"`
	CgroupInode uint64 `json:"cgroup_inode,omitempty"`
	RunDir      string `json:"run_dir"`
	// Lifetime.
	OwnerExit     string          `json:"owner_exit"` // stop | detach
	Owner         *Identity       `json:"owner,omitempty"`
	UntilStopped  bool            `json:"until_stopped"`
	TTL           time.Duration   `json:"ttl_ns,omitempty"`
	Grace         time.Duration   `json:"grace_ns"`
	IdleTimeout   time.Duration   `json:"idle_timeout_ns,omitempty"`
	ActivatedMono time.Duration   `json:"activated_mono_ns,omitempty"`
	DeadlineMono  time.Duration   `json:"deadline_mono_ns,omitempty"`
	DeadlineAt    *time.Time      `json:"deadline_at,omitempty"`
	Spec          json.RawMessage `json:"spec,omitempty"`
	// The view: trees, keeper and planned rules.
	Trees  []TreeRecord    `json:"trees,omitempty"`
	Keeper *Identity       `json:"keeper,omitempty"`
	View   json.RawMessage `json:"view,omitempty"`
	// Limits is the limit group record (mechanisms and group paths).
	Limits json.RawMessage `json:"limits,omitempty"`
	// Unit is the transient systemd scope (systemd-scope tier),
	// ScopeMembership how its first process was handed over (PIDFDs or
	// PIDs), ManagerResult the manager's result when it stopped.
	Unit            string `json:"unit,omitempty"`
	ScopeMembership string `json:"scope_membership,omitempty"`
	ManagerResult   string `json:"manager_result,omitempty"`
	// LimitEvidence is the kernel's counters read at the confirmed stop,
	// just before the limit groups were removed.
	LimitEvidence json.RawMessage `json:"limit_evidence,omitempty"`
	// Stop.
	StopReason      string     `json:"stop_reason,omitempty"`
	StopRequestedAt *time.Time `json:"stop_requested_at,omitempty"`
	StoppedAt       *time.Time `json:"stopped_at,omitempty"`
	CleanupErrors   []string   `json:"cleanup_errors,omitempty"`
	Error           string     `json:"error,omitempty"`
}

// TreeRecord is one private tree of an environment.
type TreeRecord struct {
	Name     string `json:"name"`
	Kind     string `json:"kind"`
	Baseline string `json:"baseline,omitempty"`
	Source   string `json:"source"`
	// HostPath is where the tree's own files are on the host (the
	// snapshot or copy directory; the upper directory of an overlay).
	HostPath string `json:"host_path"`
	// WorkloadPath is the path the workload uses inside the view.
	WorkloadPath string `json:"workload_path"`
	// Storage is the backend's identity record (opaque here).
	Storage json.RawMessage `json:"storage,omitempty"`
	State   string          `json:"state"` // allocated | removed
	Note    string          `json:"note,omitempty"`
}

// Baseline is a registered, prepared source for private trees.
type Baseline struct {
	Name      string    `json:"name"`
	Rev       int64     `json:"rev"`
	Path      string    `json:"path"`
	Kind      string    `json:"kind"` // btrfs-subvolume | directory
	Device    uint64    `json:"device"`
	Inode     uint64    `json:"inode"`
	FSType    string    `json:"fs_type"`
	Offers    []string  `json:"offers"` // tree kinds it can back
	Notes     []string  `json:"notes,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// InsertBaseline registers a baseline; the name must be new.
func (t *Tx) InsertBaseline(b *Baseline) error {
	b.Rev = 1
	data, err := json.Marshal(b)
	if err != nil {
		return err
	}
	_, err = t.tx.ExecContext(t.ctx, "INSERT INTO baselines (name, rev, state, created_at, data) VALUES (?, 1, 'registered', ?, ?)", b.Name, b.CreatedAt.UnixNano(), string(data))
	if err != nil {
		if strings.Contains(err.Error(), "UNIQUE") {
			return fmt.Errorf("baseline %q is already registered (remove it first with 'hostfork baseline rm %s'): %w", b.Name, b.Name, ErrConflict)
		}
		return fmt.Errorf("registry: %w", err)
	}
	return nil
}

// DeleteBaseline unregisters a baseline (its files are never touched).
func (t *Tx) DeleteBaseline(name string) error {
	res, err := t.tx.ExecContext(t.ctx, "DELETE FROM baselines WHERE name = ?", name)
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("no baseline named %q: %w", name, ErrNotFound)
	}
	return nil
}

// Baseline reads one baseline.
func (d *DB) Baseline(ctx context.Context, name string) (*Baseline, error) {
	return readRow[Baseline](ctx, d.db, "baselines", name)
}

// Baselines lists registered baselines by name.
func (d *DB) Baselines(ctx context.Context) ([]*Baseline, error) {
	return readRows[Baseline](ctx, d.db, "SELECT rev, data FROM baselines ORDER BY name", nil)
}

// Command record states.
const (
	CmdReserved = "reserved" // registered, guardian not yet released
	CmdRunning  = "running"  // released; tree may be live
	CmdExited   = "exited"   // tree exit observed
	CmdFailed   = "failed"   // never started (launch aborted)
	CmdUnknown  = "unverified"
)

// Leader and tree states.
const (
	Pending    = "pending"
	Live       = "live"
	Exited     = "exited"
	Unverified = "unverified"
	Unknown    = "unknown"
)

// StreamCapture is one stream's capture result.
type StreamCapture struct {
	State string `json:"state"` // complete | incomplete | failed | unknown
	Bytes int64  `json:"bytes"`
	Error string `json:"error,omitempty"`
}

// Command is one command's record.
type Command struct {
	ID         string            `json:"id"`
	EnvID      string            `json:"env"`
	Rev        int64             `json:"rev"`
	State      string            `json:"record_state"`
	CreatedAt  time.Time         `json:"created_at"`
	Purpose    string            `json:"purpose,omitempty"`
	Labels     map[string]string `json:"labels,omitempty"`
	Argv       []string          `json:"argv"`
	Cwd        string            `json:"cwd,omitempty"`
	Output     string            `json:"output"`
	Dir        string            `json:"dir"`
	StdoutPath string            `json:"stdout_path,omitempty"`
	StderrPath string            `json:"stderr_path,omitempty"`

	// EnvPolicy is the launch environment policy applied ("" when the
	// caller gave the environment explicitly); EnvPolicyNote says when it
	// could not be followed (a failed login-shell capture).
	EnvPolicy     string `json:"env_policy,omitempty"`
	EnvPolicyNote string `json:"env_policy_note,omitempty"`

	Tier        string     `json:"tier"`
	Launcher    *Identity  `json:"launcher,omitempty"`
	CgroupPath  string     `json:"cgroup_path,omitempty"`
	CgroupInode uint64     `json:"cgroup_inode,omitempty"`
	Guardian    *Identity  `json:"guardian,omitempty"`
	ProofDev    uint64     `json:"proof_dev,omitempty"`
	ProofIno    uint64     `json:"proof_ino,omitempty"`
	Workload    *Identity  `json:"workload,omitempty"`
	StartedAt   *time.Time `json:"started_at,omitempty"`

	// Result.
	ExitCode       *int       `json:"exit_code"`
	Signal         *int       `json:"signal"`
	LeaderState    string     `json:"leader_state"`
	LeaderExitedAt *time.Time `json:"leader_exited_at,omitempty"`
	TreeState      string     `json:"tree_state"`
	TreeExitedAt   *time.Time `json:"tree_exited_at,omitempty"`
	TreeEvidence   string     `json:"tree_evidence,omitempty"`
	StopReason     string     `json:"stop_reason,omitempty"`
	OOM            *bool      `json:"oom"`
	// OOMBaseline is the environment's OOM-kill counter when the command
	// WorkloadKind is the workload kind ("agent" takes part in admission)
	// and Admission the admission decision it started under.
	WorkloadKind string `json:"workload_kind,omitempty"`
	Admission    string `json:"admission,omitempty"`
	// started; OOM is true when it rose during the command's life.
	OOMBaseline   *uint64                  `json:"oom_baseline,omitempty"`
	OOMEvidence   string                   `json:"oom_evidence,omitempty"`
	Capture       map[string]StreamCapture `json:"capture,omitempty"`
	CleanupErrors []string                 `json:"cleanup_errors,omitempty"`
	Error         string                   `json:"error,omitempty"`
}

// Terminal reports whether the command's record is final.
func (c *Command) Terminal() bool { return c.State == CmdExited || c.State == CmdFailed }

// InsertEnv adds a new environment at revision 1.
func (t *Tx) InsertEnv(e *Env) error {
	e.Rev = 1
	return t.insert(envsTable, e.ID, e.State, e.CreatedAt, nil, e)
}

// UpdateEnv writes e if e.Rev is still current, and advances e.Rev.
func (t *Tx) UpdateEnv(e *Env) error {
	old := e.Rev
	e.Rev++
	if err := t.update(envsTable, e.ID, old, e.State, e); err != nil {
		e.Rev = old
		return err
	}
	return nil
}

// InsertCommand adds a new command at revision 1.
func (t *Tx) InsertCommand(c *Command) error {
	c.Rev = 1
	return t.insert(commandsTable, c.ID, c.State, c.CreatedAt, map[string]any{"env_id": c.EnvID}, c)
}

// UpdateCommand writes c if c.Rev is still current, and advances c.Rev.
func (t *Tx) UpdateCommand(c *Command) error {
	old := c.Rev
	c.Rev++
	if err := t.update(commandsTable, c.ID, old, c.State, c); err != nil {
		c.Rev = old
		return err
	}
	return nil
}

// Env reads one environment.
func (d *DB) Env(ctx context.Context, id string) (*Env, error) {
	return readRow[Env](ctx, d.db, envsTable, id)
}

// Env reads one environment inside the transaction.
func (t *Tx) Env(id string) (*Env, error) {
	return readRow[Env](t.ctx, t.tx, envsTable, id)
}

// Command reads one command.
func (d *DB) Command(ctx context.Context, id string) (*Command, error) {
	return readRow[Command](ctx, d.db, commandsTable, id)
}

// Command reads one command inside the transaction.
func (t *Tx) Command(id string) (*Command, error) {
	return readRow[Command](t.ctx, t.tx, commandsTable, id)
}

// EnvFilter selects environments.
type EnvFilter struct {
	States []string // empty: all
}

// revisioned is a row type that carries its revision.
type revisioned[T any] interface {
	*T
	setRev(int64)
}

func (e *Env) setRev(r int64)      { e.Rev = r }
func (c *Command) setRev(r int64)  { c.Rev = r }
func (b *Baseline) setRev(r int64) { b.Rev = r }

// readRow reads one row of tb as a T, with its revision.
func readRow[T any, P revisioned[T]](ctx context.Context, q querier, tb table, id string) (*T, error) {
	var v T
	rev, err := getRow(ctx, q, tb, id, &v)
	if err != nil {
		return nil, err
	}
	P(&v).setRev(rev)
	return &v, nil
}

// readRows runs a "SELECT rev, data" query and decodes each row as a T.
func readRows[T any, P revisioned[T]](ctx context.Context, q querier, query string, args []any) ([]*T, error) {
	var out []*T
	err := scanRows(ctx, q, query, args, func(rev int64, data []byte) error {
		var v T
		if err := json.Unmarshal(data, &v); err != nil {
			return err
		}
		P(&v).setRev(rev)
		out = append(out, &v)
		return nil
	})
	return out, err
}

// Envs lists environments, oldest first.
func (d *DB) Envs(ctx context.Context, f EnvFilter) ([]*Env, error) {
	q, args := "SELECT rev, data FROM envs", []any{}
	if len(f.States) > 0 {
		q += " WHERE state IN (" + placeholders(len(f.States)) + ")"
		for _, s := range f.States {
			args = append(args, s)
		}
	}
	q += " ORDER BY created_at, id"
	return readRows[Env](ctx, d.db, q, args)
}

// CommandFilter selects commands.
type CommandFilter struct {
	EnvID  string
	States []string
}

// Commands lists commands, oldest first.
func (d *DB) Commands(ctx context.Context, f CommandFilter) ([]*Command, error) {
	q, args := "SELECT rev, data FROM commands WHERE 1=1", []any{}
	if f.EnvID != "" {
		q += " AND env_id = ?"
		args = append(args, f.EnvID)
	}
	if len(f.States) > 0 {
		q += " AND state IN (" + placeholders(len(f.States)) + ")"
		for _, s := range f.States {
			args = append(args, s)
		}
	}
	q += " ORDER BY created_at, id"
	return readRows[Command](ctx, d.db, q, args)
}

// Commands lists an environment's commands inside the transaction.
func (t *Tx) Commands(envID string) ([]*Command, error) {
	return readRows[Command](t.ctx, t.tx, "SELECT rev, data FROM commands WHERE env_id = ? ORDER BY created_at, id", []any{envID})
}

func scanRows(ctx context.Context, q querier, query string, args []any, fn func(rev int64, data []byte) error) error {
	rows, err := q.QueryContext(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var rev int64
		var data []byte
		if err := rows.Scan(&rev, &data); err != nil {
			return err
		}
		if err := fn(rev, data); err != nil {
			return fmt.Errorf("registry row is corrupt: %w", err)
		}
	}
	return rows.Err()
}

func placeholders(n int) string {
	s := make([]byte, 0, 2*n)
	for i := 0; i < n; i++ {
		if i > 0 {
			s = append(s, ',')
		}
		s = append(s, '?')
	}
	return string(s)
}

// Intent states.
const (
	IntentPending   = "pending"   // recorded before the OS mutation
	IntentCreated   = "created"   // the resource exists; Identity says which
	IntentReleased  = "released"  // the resource was removed
	IntentAbandoned = "abandoned" // the mutation never produced a resource
)

// Intent is one allocation-ledger entry.
type Intent struct {
	ID        int64     `json:"id"`
	Rev       int64     `json:"rev"`
	EnvID     string    `json:"env"`
	CommandID string    `json:"command,omitempty"`
	Kind      string    `json:"kind"` // cgroup | dir
	Target    string    `json:"target"`
	State     string    `json:"state"`
	Identity  string    `json:"identity,omitempty"`
	Error     string    `json:"error,omitempty"`
	CreatedAt time.Time `json:"created_at"`
}

// AddIntent records that Target is about to be created.
func (t *Tx) AddIntent(envID, commandID, kind, target string) (int64, error) {
	res, err := t.tx.ExecContext(t.ctx, "INSERT INTO intents (env_id, command_id, rev, kind, target, state, created_at) VALUES (?, ?, 1, ?, ?, ?, ?)", envID, commandID, kind, target, IntentPending, now())
	if err != nil {
		return 0, fmt.Errorf("registry: recording intent for %s: %w", target, err)
	}
	return res.LastInsertId()
}

// SettleIntent moves an intent to state, with the resource identity (for
// created) or an error text.
func (t *Tx) SettleIntent(id int64, state, identity, errText string) error {
	res, err := t.tx.ExecContext(t.ctx, "UPDATE intents SET rev = rev + 1, state = ?, identity = CASE WHEN ? = '' THEN identity ELSE ? END, error = ?, settled_at = ? WHERE id = ?", state, identity, identity, errText, now(), id)
	if err != nil {
		return fmt.Errorf("registry: settling intent %d: %w", id, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("intent %d: %w", id, ErrNotFound)
	}
	return nil
}

// Intents lists ledger entries, optionally only those of an env and/or in
// the given states.
func (d *DB) Intents(ctx context.Context, envID string, states ...string) ([]Intent, error) {
	q, args := "SELECT id, rev, env_id, command_id, kind, target, state, identity, error, created_at FROM intents WHERE 1=1", []any{}
	if envID != "" {
		q += " AND env_id = ?"
		args = append(args, envID)
	}
	if len(states) > 0 {
		q += " AND state IN (" + placeholders(len(states)) + ")"
		for _, s := range states {
			args = append(args, s)
		}
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

// Setting reads a store-wide setting; ok is false when unset.
func (d *DB) Setting(ctx context.Context, key string) (value string, ok bool, err error) {
	err = d.db.QueryRowContext(ctx, "SELECT value FROM settings WHERE key = ?", key).Scan(&value)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	return value, err == nil, err
}

// SetSetting writes a store-wide setting.
func (t *Tx) SetSetting(key, value string) error {
	_, err := t.tx.ExecContext(t.ctx, "INSERT INTO settings (key, value) VALUES (?, ?) ON CONFLICT(key) DO UPDATE SET value = excluded.value", key, value)
	return err
}

// DeleteEnv removes an environment's rows (the environment, its commands
// and its intents). Retention calls it after the evidence files are gone;
// it refuses while any intent still names an existing resource.
func (t *Tx) DeleteEnv(id string) error {
	var n int
	if err := t.tx.QueryRowContext(t.ctx, "SELECT count(*) FROM intents WHERE env_id = ? AND state IN (?, ?)", id, IntentPending, IntentCreated).Scan(&n); err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	if n > 0 {
		return fmt.Errorf("environment %s still has %d unsettled resources on the ledger: %w", id, n, ErrConflict)
	}
	for _, q := range []string{"DELETE FROM intents WHERE env_id = ?", "DELETE FROM commands WHERE env_id = ?", "DELETE FROM envs WHERE id = ?"} {
		if _, err := t.tx.ExecContext(t.ctx, q, id); err != nil {
			return fmt.Errorf("registry: %w", err)
		}
	}
	return nil
}

// SettleIntentsOf settles every created/pending intent of an environment
// whose target satisfies gone (the resource no longer exists).
func (t *Tx) SettleIntentsOf(envID string, gone func(kind, target string) bool) error {
	rows, err := t.tx.QueryContext(t.ctx, "SELECT id, kind, target, state FROM intents WHERE env_id = ? AND state IN (?, ?)", envID, IntentPending, IntentCreated)
	if err != nil {
		return fmt.Errorf("registry: %w", err)
	}
	type row struct {
		id                  int64
		kind, target, state string
	}
	var rs []row
	for rows.Next() {
		var r row
		if err := rows.Scan(&r.id, &r.kind, &r.target, &r.state); err != nil {
			rows.Close()
			return err
		}
		rs = append(rs, r)
	}
	rows.Close()
	for _, r := range rs {
		if !gone(r.kind, r.target) {
			continue
		}
		st := IntentReleased
		if r.state == IntentPending {
			st = IntentAbandoned
		}
		if err := t.SettleIntent(r.id, st, "", ""); err != nil {
			return err
		}
	}
	return nil
}
