package registry

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/habemus-papadum/hostfork/api"
)

func jsonMarshal(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

// Env reads one environment.
func (d *DB) Env(ctx context.Context, id string) (*api.Env, error) {
	e, err := scanEnv(d.db.QueryRowContext(ctx, envSelect+" WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("environment %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	labels, err := d.labels(ctx, "e", []string{id})
	if err != nil {
		return nil, err
	}
	e.Labels = orEmpty(labels[id])
	return e, nil
}

// Command reads one command.
func (d *DB) Command(ctx context.Context, id string) (*api.Command, error) {
	c, err := scanCommand(d.db.QueryRowContext(ctx, commandSelect+" WHERE id = ?", id))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("command %s: %w", id, ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	labels, err := d.labels(ctx, "c", []string{id})
	if err != nil {
		return nil, err
	}
	c.Labels = orEmpty(labels[id])
	return c, nil
}

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// EnvQuery selects environments by their recorded state and labels.
type EnvQuery struct {
	IDs    []string
	States []api.EnvState
	Labels api.Selector
}

// Envs lists environments, oldest first.
func (d *DB) Envs(ctx context.Context, q EnvQuery) ([]*api.Env, error) {
	sqlq, args := envSelect+" WHERE 1=1", []any{}
	if len(q.IDs) > 0 {
		sqlq += " AND id IN (" + placeholders(len(q.IDs)) + ")"
		for _, id := range q.IDs {
			args = append(args, id)
		}
	}
	if len(q.States) > 0 {
		sqlq += " AND state IN (" + placeholders(len(q.States)) + ")"
		for _, s := range q.States {
			args = append(args, string(s))
		}
	}
	sel, sargs := selectorSQL("e", "envs.id", q.Labels)
	sqlq += sel
	args = append(args, sargs...)
	sqlq += " ORDER BY created_at, id"
	rows, err := d.db.QueryContext(ctx, sqlq, args...)
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	defer rows.Close()
	var out []*api.Env
	var ids []string
	for rows.Next() {
		e, err := scanEnv(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, e)
		ids = append(ids, e.ID)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	labels, err := d.labels(ctx, "e", ids)
	if err != nil {
		return nil, err
	}
	for _, e := range out {
		e.Labels = orEmpty(labels[e.ID])
	}
	return out, nil
}

// CommandQuery selects commands by their recorded state, environment and
// labels.
type CommandQuery struct {
	Env    string
	Envs   []string
	States []api.CommandState
	Labels api.Selector
}

// Commands lists commands, oldest first.
func (d *DB) Commands(ctx context.Context, q CommandQuery) ([]*api.Command, error) {
	sqlq, args := commandSelect+" WHERE 1=1", []any{}
	if q.Env != "" {
		sqlq += " AND env_id = ?"
		args = append(args, q.Env)
	}
	if len(q.Envs) > 0 {
		sqlq += " AND env_id IN (" + placeholders(len(q.Envs)) + ")"
		for _, id := range q.Envs {
			args = append(args, id)
		}
	}
	if len(q.States) > 0 {
		sqlq += " AND state IN (" + placeholders(len(q.States)) + ")"
		for _, s := range q.States {
			args = append(args, string(s))
		}
	}
	sel, sargs := selectorSQL("c", "commands.id", q.Labels)
	sqlq += sel
	args = append(args, sargs...)
	sqlq += " ORDER BY created_at, id"
	rows, err := d.db.QueryContext(ctx, sqlq, args...)
	if err != nil {
		return nil, fmt.Errorf("registry: %w", err)
	}
	defer rows.Close()
	var out []*api.Command
	var ids []string
	for rows.Next() {
		c, err := scanCommand(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, c)
		ids = append(ids, c.ID)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	labels, err := d.labels(ctx, "c", ids)
	if err != nil {
		return nil, err
	}
	for _, c := range out {
		c.Labels = orEmpty(labels[c.ID])
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
