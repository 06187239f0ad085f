package registry

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/habemus-papadum/hostfork/api"
)

func jsonMarshal(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

// Env reads one environment.
func (d *DB) Env(ctx context.Context, id string) (*api.Env, error) {
	return one(ctx, d, "e", envSelect, "environment", id, scanEnv, func(e *api.Env) *map[string]string { return &e.Labels })
}

// Command reads one command.
func (d *DB) Command(ctx context.Context, id string) (*api.Command, error) {
	return one(ctx, d, "c", commandSelect, "command", id, scanCommand, func(c *api.Command) *map[string]string { return &c.Labels })
}

// one reads the row with id and fills its labels (owner "e" or "c").
func one[T any](ctx context.Context, d *DB, owner, sel, what, id string, scan func(rowScanner) (*T, error), labels func(*T) *map[string]string) (*T, error) {
	v, err := scan(d.db.QueryRowContext(ctx, sel+" WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%s %s: %w", what, id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	l, err := d.labels(ctx, owner, []string{id})
	if err != nil {
		return nil, err
	}
	*labels(v) = orEmpty(l[id])
	return v, nil
}

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// AnyEnv reports whether the registry holds at least one environment.
func (d *DB) AnyEnv(ctx context.Context) (bool, error) {
	var one int
	err := d.db.QueryRowContext(ctx, "SELECT 1 FROM envs LIMIT 1").Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("registry: %w", err)
	}
	return true, nil
}

// EnvDeadlines reads the recorded deadlines of the environments ids
// (absent: none), without decoding their records.
func (d *DB) EnvDeadlines(ctx context.Context, ids []string) (map[string]*time.Time, error) {
	out := map[string]*time.Time{}
	if len(ids) == 0 {
		return out, nil
	}
	var w where
	if len(ids) <= 500 {
		w.in("id", ids)
	}
	rows, err := d.db.QueryContext(ctx, "SELECT id, deadline_at FROM envs WHERE 1=1"+w.sql, w.args...)
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id string
		var at sql.NullInt64
		if err := rows.Scan(&id, &at); err != nil {
			return nil, err
		}
		if t := timeOf(at); t != nil {
			out[id] = t
		}
	}
	return out, rows.Err()
}

// EnvQuery selects environments by their recorded state and labels.
type EnvQuery struct {
	IDs    []string
	States []api.EnvState
	Labels api.Selector
}

// Envs lists environments, oldest first.
func (d *DB) Envs(ctx context.Context, q EnvQuery) ([]*api.Env, error) {
	var w where
	w.in("id", q.IDs)
	w.in("state", strs(q.States))
	w.labels("e", "envs.id", q.Labels)
	return list(ctx, d, "e", envSelect, w, scanEnv, func(e *api.Env) (string, *map[string]string) { return e.ID, &e.Labels })
}

// CommandQuery selects commands by their recorded state, environment and
// labels.
type CommandQuery struct {
	Env    string
	Envs   []string
	States []api.CommandState
	Labels api.Selector
	// Brief reads only the columns of briefColumns: what a listing of
	// final commands prints (api.CommandFilter.Brief). The other fields
	// are zero, for every row: a caller rereads the rows it needs whole.
	Brief bool
}

// Commands lists commands, oldest first.
func (d *DB) Commands(ctx context.Context, q CommandQuery) ([]*api.Command, error) {
	var w where
	if q.Env != "" {
		w.in("env_id", []string{q.Env})
	}
	w.in("env_id", q.Envs)
	w.in("state", strs(q.States))
	w.labels("c", "commands.id", q.Labels)
	sel, scan := commandSelect, scanCommand
	if q.Brief {
		sel, scan = briefSelect, scanBrief
	}
	return list(ctx, d, "c", sel, w, scan, func(c *api.Command) (string, *map[string]string) { return c.ID, &c.Labels })
}

// where is a query's conditions and their arguments.
type where struct {
	sql  string
	args []any
}

// in adds "col IN (vals)" (nothing for no vals).
func (w *where) in(col string, vals []string) {
	if len(vals) == 0 {
		return
	}
	w.sql += " AND " + col + " IN (" + placeholders(len(vals)) + ")"
	for _, v := range vals {
		w.args = append(w.args, v)
	}
}

// labels adds a label selector's conditions.
func (w *where) labels(owner, idCol string, sel api.Selector) {
	s, args := selectorSQL(owner, idCol, sel)
	w.sql += s
	w.args = append(w.args, args...)
}

func strs[S ~string](v []S) []string {
	out := make([]string, len(v))
	for i, s := range v {
		out[i] = string(s)
	}
	return out
}

// list runs a select with w, oldest first, scans each row and fills its
// labels (owner "e" or "c") in one more query.
func list[T any](ctx context.Context, d *DB, owner, sel string, w where, scan func(rowScanner) (*T, error), key func(*T) (string, *map[string]string)) ([]*T, error) {
	rows, err := d.db.QueryContext(ctx, sel+" WHERE 1=1"+w.sql+" ORDER BY created_at, id", w.args...)
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	defer rows.Close()
	var out []*T
	var ids []string
	for rows.Next() {
		r, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, r)
		id, _ := key(r)
		ids = append(ids, id)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	labels, err := d.labels(ctx, owner, ids)
	if err != nil {
		return nil, err
	}
	for _, r := range out {
		id, l := key(r)
		*l = orEmpty(labels[id])
	}
	return out, nil
}

// selectorSQL turns a label selector into EXISTS clauses.
func selectorSQL(owner, idCol string, sel api.Selector) (string, []any) {
	var b strings.Builder
	var args []any
	for _, t := range sel {
		k, v, hasValue := strings.Cut(t, "=")
		b.WriteString(" AND EXISTS (SELECT 1 FROM labels l WHERE l.owner = ? AND l.id = " + idCol + " AND l.key = ?")
		args = append(args, owner, k)
		if hasValue {
			b.WriteString(" AND l.value = ?")
			args = append(args, v)
		}
		b.WriteString(")")
	}
	return b.String(), args
}

// labels reads the labels of the given rows. For many ids it reads all
// labels of the owner kind at once.
func (d *DB) labels(ctx context.Context, owner string, ids []string) (map[string]map[string]string, error) {
	out := map[string]map[string]string{}
	if len(ids) == 0 {
		return out, nil
	}
	var rows *sql.Rows
	var err error
	if len(ids) > 200 {
		rows, err = d.db.QueryContext(ctx, "SELECT id, key, value FROM labels WHERE owner = ?", owner)
	} else {
		args := []any{owner}
		for _, id := range ids {
			args = append(args, id)
		}
		rows, err = d.db.QueryContext(ctx, "SELECT id, key, value FROM labels WHERE owner = ? AND id IN ("+placeholders(len(ids))+")", args...)
	}
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var id, k, v string
		if err := rows.Scan(&id, &k, &v); err != nil {
			return nil, err
		}
		m := out[id]
		if m == nil {
			m = map[string]string{}
			out[id] = m
		}
		m[k] = v
	}
	return out, rows.Err()
}

// Baseline reads one baseline.
func (d *DB) Baseline(ctx context.Context, name string) (*api.Baseline, error) {
	var rev int64
	var data string
	err := d.db.QueryRowContext(ctx, "SELECT rev, data FROM baselines WHERE name = ?", name).Scan(&rev, &data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("baseline %s: %w", name, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	var b api.Baseline
	if err := json.Unmarshal([]byte(data), &b); err != nil {
		return nil, fmt.Errorf("baseline %s: its record is corrupt: %w", name, err)
	}
	b.Rev = rev
	return &b, nil
}

// Baselines lists registered baselines by name.
func (d *DB) Baselines(ctx context.Context) ([]*api.Baseline, error) {
	rows, err := d.db.QueryContext(ctx, "SELECT rev, data FROM baselines ORDER BY name")
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	defer rows.Close()
	var out []*api.Baseline
	for rows.Next() {
		var rev int64
		var data string
		if err := rows.Scan(&rev, &data); err != nil {
			return nil, err
		}
		var b api.Baseline
		if err := json.Unmarshal([]byte(data), &b); err != nil {
			return nil, fmt.Errorf("a baseline record is corrupt: %w", err)
		}
		b.Rev = rev
		out = append(out, &b)
	}
	return out, rows.Err()
}

// Counts is a summary of the registry for metrics and usage.
type Counts struct {
	Envs     map[api.EnvState]int
	Commands map[api.CommandState]int
}

// Count counts environments and commands by recorded state.
func (d *DB) Count(ctx context.Context) (Counts, error) {
	c := Counts{Envs: map[api.EnvState]int{}, Commands: map[api.CommandState]int{}}
	for _, q := range []struct {
		sql string
		put func(string, int)
	}{
		{"SELECT state, count(*) FROM envs GROUP BY state", func(s string, n int) { c.Envs[api.EnvState(s)] = n }},
		{"SELECT state, count(*) FROM commands GROUP BY state", func(s string, n int) { c.Commands[api.CommandState(s)] = n }},
	} {
		rows, err := d.db.QueryContext(ctx, q.sql)
		if err != nil {
			return c, fmt.Errorf("registry: %w", err)
		}
		for rows.Next() {
			var s string
			var n int
			if err := rows.Scan(&s, &n); err != nil {
				rows.Close()
				return c, err
			}
			q.put(s, n)
		}
		rows.Close()
	}
	return c, nil
}
