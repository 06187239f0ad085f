package registry

import (
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/habemus-papadum/hostfork/api"
)

// commandColumns lists the commands table's columns in the order
// commandValues writes them and scanCommand reads them. The first five are
// the key columns (id, env_id, rev, state, created_at).
var commandColumns = []string{
	"id", "env_id", "rev", "state", "created_at",
	"purpose", "argv", "cwd", "output", "dir", "stdout_path", "stderr_path",
	"env_policy", "env_policy_note", "env_keys", "tier",
	"boot_id", "launcher_pid", "launcher_start",
	"cgroup_path", "cgroup_inode", "guardian_pid", "guardian_start", "proof_dev", "proof_ino",
	"workload_pid", "workload_start", "started_at", "timeout_ns", "timeout_mono",
	"exit_code", "signal", "leader_state", "leader_exited_at",
	"tree_state", "tree_exited_at", "tree_evidence", "stop_reason", "stopped_by_hostfork",
	"oom", "oom_evidence", "oom_baseline", "survivors", "output_truncated", "limits_note",
	"workload_kind", "admission", "capture", "cleanup_errors", "error",
	"session", "last_input_at", "last_output_at",
}

var (
	commandSelect = "SELECT " + strings.Join(commandColumns, ", ") + " FROM commands"
	commandInsert = "INSERT INTO commands (" + strings.Join(commandColumns, ", ") + ") VALUES (" + placeholders(len(commandColumns)) + ")"
	// commandUpdate writes every column but the key ones, compare-and-set
	// on rev.
	commandUpdate = func() string {
		sets := make([]string, 0, len(commandColumns))
		sets = append(sets, "rev = rev + 1", "state = ?")
		for _, c := range commandColumns[5:] {
			sets = append(sets, c+" = ?")
		}
		return "UPDATE commands SET " + strings.Join(sets, ", ") + " WHERE id = ? AND rev = ?"
	}()
)

// placeholders is "?,?,…" for n values.
func placeholders(n int) string { return strings.TrimSuffix(strings.Repeat("?,", n), ",") }

func nsOf(t *time.Time) any {
	if t == nil {
		return nil
	}
	return t.UnixNano()
}

func timeOf(v sql.NullInt64) *time.Time {
	if !v.Valid {
		return nil
	}
	t := time.Unix(0, v.Int64).UTC()
	return &t
}

func intOf(p *int) any {
	if p == nil {
		return nil
	}
	return int64(*p)
}

func nullInt(v sql.NullInt64) *int {
	if !v.Valid {
		return nil
	}
	n := int(v.Int64)
	return &n
}

func boolOf(p *bool) any {
	if p == nil {
		return nil
	}
	if *p {
		return int64(1)
	}
	return int64(0)
}

func b2i(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// jsonText encodes v for a TEXT column; empty values are "".
func jsonText(v any) string {
	switch x := v.(type) {
	case []string:
		if len(x) == 0 {
			return ""
		}
	case []api.Identity:
		if len(x) == 0 {
			return ""
		}
	case map[string]api.StreamCapture:
		if len(x) == 0 {
			return ""
		}
	}
	b, err := json.Marshal(v)
	if err != nil {
		return ""
	}
	return string(b)
}

func fromJSON(s string, v any) error {
	switch s {
	case "", "null":
		return nil
	case "[]":
		// The common empty columns, without the decoder (a listing of
		// thousands of commands decodes several per row).
		switch p := v.(type) {
		case *[]string:
			*p = []string{}
			return nil
		case *[]api.Identity:
			*p = []api.Identity{}
			return nil
		}
	case "{}":
		if p, ok := v.(*map[string]api.StreamCapture); ok {
			*p = map[string]api.StreamCapture{}
			return nil
		}
	}
	if p, ok := v.(*[]string); ok {
		if l, ok := plainStrings(s); ok {
			*p = l
			return nil
		}
	}
	return json.Unmarshal([]byte(s), v)
}

// plainStrings decodes a JSON array of strings as encoding/json writes it
// when no string needs an escape or holds a byte outside printable ASCII
// (an argv, mostly): ["a","b c"]. Anything else is not ok and goes to the
// decoder.
func plainStrings(s string) ([]string, bool) {
	if len(s) < 4 || s[0] != '[' || s[len(s)-1] != ']' {
		return nil, false
	}
	var out []string
	i := 1
	for {
		if i >= len(s) || s[i] != '"' {
			return nil, false
		}
		j := i + 1
		for j < len(s) && s[j] != '"' {
			if c := s[j]; c == '\\' || c < 0x20 || c >= 0x7f {
				return nil, false
			}
			j++
		}
		if j+1 >= len(s) {
			return nil, false
		}
		out = append(out, s[i+1:j])
		switch s[j+1] {
		case ',':
			i = j + 2
		case ']':
			if j+2 != len(s) {
				return nil, false
			}
			return out, true
		default:
			return nil, false
		}
	}
}

func identityPIDs(id *api.Identity) (int64, int64) {
	if id == nil {
		return 0, 0
	}
	return int64(id.PID), int64(id.StartTime)
}

func identityOf(boot string, pid, start int64) *api.Identity {
	if pid == 0 {
		return nil
	}
	return &api.Identity{BootID: boot, PID: int(pid), StartTime: uint64(start)}
}

// bootOf is the boot id a command's identities share.
func bootOf(c *api.Command) string {
	for _, id := range []*api.Identity{c.Guardian, c.Launcher, c.Workload} {
		if id != nil && id.BootID != "" {
			return id.BootID
		}
	}
	return ""
}

// commandTail is the values of the non-key columns, in commandColumns
// order.
func commandTail(c *api.Command) []any {
	lp, ls := identityPIDs(c.Launcher)
	gp, gs := identityPIDs(c.Guardian)
	wp, ws := identityPIDs(c.Workload)
	argv := c.Argv
	if argv == nil {
		argv = []string{}
	}
	argvJSON, _ := json.Marshal(argv) // a []string always encodes
	var oomBase any
	if c.OOMBaseline != nil {
		oomBase = int64(*c.OOMBaseline)
	}
	return []any{
		c.Purpose, string(argvJSON), c.Cwd, string(c.Output), c.Dir, c.StdoutPath, c.StderrPath,
		c.EnvPolicy, c.EnvPolicyNote, jsonText(c.EnvKeys), string(c.Tier),
		bootOf(c), lp, ls,
		c.CgroupPath, int64(c.CgroupInode), gp, gs, int64(c.ProofDev), int64(c.ProofIno),
		wp, ws, nsOf(c.StartedAt), int64(c.Timeout), int64(c.TimeoutMono),
		intOf(c.ExitCode), intOf(c.Signal), string(c.LeaderState), nsOf(c.LeaderExitedAt),
		string(c.TreeState), nsOf(c.TreeExitedAt), c.TreeEvidence, string(c.StopReason), b2i(c.StoppedByHostfork),
		boolOf(c.OOM), c.OOMEvidence, oomBase, jsonText(c.Survivors), b2i(c.OutputTruncated), c.LimitsNote,
		c.WorkloadKind, c.Admission, jsonText(c.Capture), jsonText(c.CleanupErrors), c.Error,
		c.Session, nsOf(c.LastInputAt), nsOf(c.LastOutputAt),
	}
}

func commandValues(c *api.Command) []any {
	return append([]any{c.ID, c.Env, c.Rev, string(c.State), c.CreatedAt.UnixNano()}, commandTail(c)...)
}

// rowScanner is a *sql.Row or *sql.Rows.
type rowScanner interface{ Scan(dest ...any) error }

// scanCommand reads one row selected with commandSelect.
func scanCommand(r rowScanner) (*api.Command, error) {
	var c api.Command
	var state, output, tier, leader, tree, reason, argv, envKeys, survivors, capture, cleanup, boot string
	var created int64
	var lp, ls, gp, gs, wp, ws, cgIno, proofDev, proofIno, timeout, timeoutMono, byHF, trunc int64
	var started, exitCode, signal, leaderAt, treeAt, oom, oomBase, lastIn, lastOut sql.NullInt64
	err := r.Scan(&c.ID, &c.Env, &c.Rev, &state, &created,
		&c.Purpose, &argv, &c.Cwd, &output, &c.Dir, &c.StdoutPath, &c.StderrPath,
		&c.EnvPolicy, &c.EnvPolicyNote, &envKeys, &tier,
		&boot, &lp, &ls,
		&c.CgroupPath, &cgIno, &gp, &gs, &proofDev, &proofIno,
		&wp, &ws, &started, &timeout, &timeoutMono,
		&exitCode, &signal, &leader, &leaderAt,
		&tree, &treeAt, &c.TreeEvidence, &reason, &byHF,
		&oom, &c.OOMEvidence, &oomBase, &survivors, &trunc, &c.LimitsNote,
		&c.WorkloadKind, &c.Admission, &capture, &cleanup, &c.Error,
		&c.Session, &lastIn, &lastOut)
	if err != nil {
		return nil, err
	}
	c.State, c.Output, c.Tier = api.CommandState(state), api.OutputMode(output), api.Tier(tier)
	c.LeaderState, c.TreeState, c.StopReason = api.Phase(leader), api.Phase(tree), api.StopReason(reason)
	c.CreatedAt = time.Unix(0, created).UTC()
	c.Launcher = identityOf(boot, lp, ls)
	c.Guardian = identityOf(boot, gp, gs)
	c.Workload = identityOf(boot, wp, ws)
	c.CgroupInode, c.ProofDev, c.ProofIno = uint64(cgIno), uint64(proofDev), uint64(proofIno)
	c.StartedAt = timeOf(started)
	c.Timeout, c.TimeoutMono = api.Duration(timeout), time.Duration(timeoutMono)
	c.ExitCode, c.Signal = nullInt(exitCode), nullInt(signal)
	c.LeaderExitedAt, c.TreeExitedAt = timeOf(leaderAt), timeOf(treeAt)
	c.LastInputAt, c.LastOutputAt = timeOf(lastIn), timeOf(lastOut)
	c.StoppedByHostfork, c.OutputTruncated = byHF != 0, trunc != 0
	if oom.Valid {
		b := oom.Int64 != 0
		c.OOM = &b
	}
	if oomBase.Valid {
		v := uint64(oomBase.Int64)
		c.OOMBaseline = &v
	}
	if err := firstErr(
		fromJSON(argv, &c.Argv), fromJSON(envKeys, &c.EnvKeys), fromJSON(survivors, &c.Survivors),
		fromJSON(capture, &c.Capture), fromJSON(cleanup, &c.CleanupErrors),
	); err != nil {
		return nil, fmt.Errorf("command %s: a column is corrupt: %w", c.ID, err)
	}
	return &c, nil
}

// briefColumns are the columns of a brief listing (CommandQuery.Brief):
// the key columns and what a table of final commands prints. Selecting
// 14 of the 50 columns is what makes 'hostfork ps --all' over 10,000
// retained commands fast: SQLite's stepping and the scan are per column.
var briefColumns = []string{
	"id", "env_id", "rev", "state", "created_at",
	"purpose", "argv", "stdout_path", "stderr_path",
	"exit_code", "signal", "stop_reason", "stopped_by_hostfork", "error",
}

var briefSelect = "SELECT " + strings.Join(briefColumns, ", ") + " FROM commands"

// scanBrief reads a row of briefSelect.
func scanBrief(r rowScanner) (*api.Command, error) {
	var c api.Command
	var state, argv, reason string
	var created, byHF int64
	var exitCode, signal sql.NullInt64
	if err := r.Scan(&c.ID, &c.Env, &c.Rev, &state, &created,
		&c.Purpose, &argv, &c.StdoutPath, &c.StderrPath,
		&exitCode, &signal, &reason, &byHF, &c.Error); err != nil {
		return nil, err
	}
	c.State, c.StopReason = api.CommandState(state), api.StopReason(reason)
	c.CreatedAt = time.Unix(0, created).UTC()
	c.ExitCode, c.Signal = nullInt(exitCode), nullInt(signal)
	c.StoppedByHostfork = byHF != 0
	if err := fromJSON(argv, &c.Argv); err != nil {
		return nil, fmt.Errorf("command %s: a column is corrupt: %w", c.ID, err)
	}
	return &c, nil
}

func firstErr(errs ...error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

// envDoc is an environment's data document: the record without the
// fields the columns hold and without what readers compute.
func envDoc(e *api.Env) (string, error) {
	d := *e
	d.Rev, d.State = 0, ""
	d.OwnerAlive, d.Expired, d.Due, d.Commands, d.LimitsNow = "", false, "", nil, nil
	b, err := json.Marshal(&d)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

const envSelect = "SELECT id, rev, state, created_at, activated_mono, deadline_mono, data FROM envs"

func scanEnv(r rowScanner) (*api.Env, error) {
	var id, state, data string
	var rev, created, act, dl int64
	if err := r.Scan(&id, &rev, &state, &created, &act, &dl, &data); err != nil {
		return nil, err
	}
	var e api.Env
	if err := json.Unmarshal([]byte(data), &e); err != nil {
		return nil, fmt.Errorf("environment %s: its record is corrupt: %w", id, err)
	}
	e.ID, e.Rev, e.State = id, rev, api.EnvState(state)
	e.CreatedAt = time.Unix(0, created).UTC()
	e.ActivatedMono, e.DeadlineMono = time.Duration(act), time.Duration(dl)
	if e.Labels == nil {
		e.Labels = map[string]string{}
	}
	return &e, nil
}

func envValues(e *api.Env) ([]any, error) {
	doc, err := envDoc(e)
	if err != nil {
		return nil, err
	}
	return []any{e.ID, e.Rev, string(e.State), e.CreatedAt.UnixNano(), e.BootID, nsOf(e.DeadlineAt), int64(e.ActivatedMono), int64(e.DeadlineMono), doc}, nil
}

const envInsert = "INSERT INTO envs (id, rev, state, created_at, boot_id, deadline_at, activated_mono, deadline_mono, data) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
const envUpdate = "UPDATE envs SET rev = rev + 1, state = ?, boot_id = ?, deadline_at = ?, activated_mono = ?, deadline_mono = ?, data = ? WHERE id = ? AND rev = ?"
