package registry

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/mattn/go-sqlite3" // also registers the "sqlite3" driver
	"golang.org/x/sys/unix"
)

// Sentinel errors; compare with errors.Is.
var (
	// ErrNotFound: no row has that id.
	ErrNotFound = errors.New("not found")
	// ErrConflict: the row's revision changed since it was read (another
	// writer decided first). Re-read and decide again.
	ErrConflict = errors.New("revision conflict")
	// ErrAmbiguous: an id prefix matches more than one row.
	ErrAmbiguous = errors.New("ambiguous id prefix")
	// ErrNewerSchema: the database was written by a newer hostfork.
	ErrNewerSchema = errors.New("registry schema is newer than this hostfork")
	// ErrFull: the store's filesystem is full; nothing could be recorded.
	ErrFull = errors.New("the store's filesystem is full")
)

// classify marks a disk-full failure with ErrFull.
func classify(err error) error {
	if err == nil {
		return nil
	}
	var se sqlite3.Error
	if errors.As(err, &se) && (se.Code == sqlite3.ErrFull || se.SystemErrno == syscall.ENOSPC) || errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("%w (%v)", ErrFull, err)
	}
	return err
}

// DB is an open registry.
type DB struct {
	db   *sql.DB
	path string
	full bool // opened read-only: the filesystem is full
	// writing admits one write transaction of this process at a time
	// (see Write).
	writing chan struct{}
}

// FileName is the registry's file name inside the store root.
const FileName = "registry.sqlite"

// Open opens (creating and migrating if needed) root/registry.sqlite.
func Open(ctx context.Context, root string) (*DB, error) {
	path := filepath.Join(root, FileName)
	q := url.Values{}
	q.Set("_journal_mode", "WAL")
	q.Set("_busy_timeout", "30000")
	q.Set("_txlock", "immediate")
	q.Set("_synchronous", "FULL")
	q.Set("_foreign_keys", "1")
	sdb, err := sql.Open("sqlite3", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("opening registry %s: %w", path, err)
	}
	sdb.SetMaxOpenConns(4)
	sdb.SetMaxIdleConns(4)
	sdb.SetConnMaxIdleTime(0)
	d := &DB{db: sdb, path: path, writing: make(chan struct{}, 1)}
	if err := d.migrate(ctx, root); err != nil {
		sdb.Close()
		if errors.Is(classify(err), ErrFull) {
			// SQLite can't even rebuild its WAL index on a full disk. Open
			// read-only and immutable so stops can still find what to
			// kill; every write reports ErrFull.
			return openFull(ctx, path)
		}
		return nil, err
	}
	return d, nil
}

// openFull opens the registry for reading only, on a full filesystem.
func openFull(ctx context.Context, path string) (*DB, error) {
	sdb, err := sql.Open("sqlite3", "file:"+path+"?mode=ro&immutable=1")
	if err != nil {
		return nil, fmt.Errorf("opening registry %s read-only: %w", path, err)
	}
	d := &DB{db: sdb, path: path, full: true, writing: make(chan struct{}, 1)}
	if _, err := d.Version(ctx); err != nil {
		sdb.Close()
		return nil, fmt.Errorf("reading registry %s on a full filesystem: %v: %w", path, err, ErrFull)
	}
	return d, nil
}

// Full reports that the registry was opened read-only because its
// filesystem is full.
func (d *DB) Full() bool { return d.full }

// Path is the database file.
func (d *DB) Path() string { return d.path }

// Close closes the database.
func (d *DB) Close() error { return d.db.Close() }

// migrate brings the schema up to date. The first open of a new store by
// many processes at once is serialized by an flock on registry.lock, because
// switching to WAL mode needs the database to itself.
func (d *DB) migrate(ctx context.Context, root string) error {
	var v int
	if err := d.db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return fmt.Errorf("reading registry schema version of %s: %w", d.path, err)
	}
	if v == SchemaVersion {
		return nil
	}
	if v > SchemaVersion {
		return fmt.Errorf("%s has schema %d, this hostfork knows %d: %w (use the newer hostfork)", d.path, v, SchemaVersion, ErrNewerSchema)
	}
	lock, err := os.OpenFile(filepath.Join(root, "registry.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return fmt.Errorf("opening registry lock: %w", err)
	}
	defer lock.Close()
	for {
		err = unix.Flock(int(lock.Fd()), unix.LOCK_EX)
		if err != unix.EINTR {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("locking registry for migration: %w", err)
	}
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrating registry: %w", err)
	}
	defer tx.Rollback()
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return err
	}
	for ; v < SchemaVersion; v++ {
		if _, err := tx.ExecContext(ctx, migrations[v]); err != nil {
			return fmt.Errorf("registry migration %d: %w", v+1, err)
		}
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", SchemaVersion)); err != nil {
		return err
	}
	return tx.Commit()
}

// Version reports the schema version stored in the database.
func (d *DB) Version(ctx context.Context) (int, error) {
	var v int
	err := d.db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v)
	return v, err
}

// Tx is one short write transaction.
type Tx struct {
	tx  *sql.Tx
	ctx context.Context
}

// Write runs fn in a single IMMEDIATE transaction and commits it. fn must
// not perform OS operations or block.
func (d *DB) Write(ctx context.Context, fn func(*Tx) error) error {
	if d.full {
		return fmt.Errorf("registry %s: %w", d.path, ErrFull)
	}
	// SQLite admits one writer at a time anyway. Writers of this process
	// queue here instead of inside BEGIN IMMEDIATE, where each would hold
	// one of the pool's connections and sleep in SQLite's busy-handler
	// backoff (up to 100 ms a try) while the lock sits free; and with the
	// pool's connections all held by waiting writers, a transaction that
	// reads through the pool (DB.Intents inside Write) could not get one
	// and stalled until the busy timeout. Other processes still wait in
	// SQLite's busy handler.
	select {
	case d.writing <- struct{}{}:
	case <-ctx.Done():
		return fmt.Errorf("registry: %w", ctx.Err())
	}
	defer func() { <-d.writing }()
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("registry: %w", classify(err))
	}
	if err := fn(&Tx{tx: tx, ctx: ctx}); err != nil {
		tx.Rollback()
		return classify(err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("registry commit: %w", classify(err))
	}
	return nil
}

func now() int64 { return time.Now().UnixNano() }

// table names a row kind.
type table string

const (
	envsTable     table = "envs"
	commandsTable table = "commands"
)

func (t *Tx) insert(tb table, id, state string, created time.Time, extra map[string]any, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	cols := "id, rev, state, created_at, data"
	vals := "?, 1, ?, ?, ?"
	args := []any{id, state, created.UnixNano(), string(data)}
	for k, x := range extra {
		cols += ", " + k
		vals += ", ?"
		args = append(args, x)
	}
	_, err = t.tx.ExecContext(t.ctx, "INSERT INTO "+string(tb)+" ("+cols+") VALUES ("+vals+")", args...)
	if err != nil {
		return fmt.Errorf("registry insert %s %s: %w", tb, id, err)
	}
	return nil
}

// update is the compare-and-set: it writes only if rev is still current.
func (t *Tx) update(tb table, id string, rev int64, state string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return err
	}
	res, err := t.tx.ExecContext(t.ctx, "UPDATE "+string(tb)+" SET rev = rev + 1, state = ?, data = ? WHERE id = ? AND rev = ?", state, string(data), id, rev)
	if err != nil {
		return fmt.Errorf("registry update %s %s: %w", tb, id, err)
	}
	n, _ := res.RowsAffected()
	if n == 0 {
		var cur int64
		err := t.tx.QueryRowContext(t.ctx, "SELECT rev FROM "+string(tb)+" WHERE id = ?", id).Scan(&cur)
		if errors.Is(err, sql.ErrNoRows) {
			return fmt.Errorf("%s %s: %w", tb, id, ErrNotFound)
		}
		return fmt.Errorf("%s %s at revision %d, now %d: %w", tb, id, rev, cur, ErrConflict)
	}
	return nil
}

type querier interface {
	QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row
	QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error)
}

func getRow(ctx context.Context, q querier, tb table, id string, v any) (int64, error) {
	var rev int64
	var data string
	key := "id"
	if tb == "baselines" {
		key = "name"
	}
	err := q.QueryRowContext(ctx, "SELECT rev, data FROM "+string(tb)+" WHERE "+key+" = ?", id).Scan(&rev, &data)
	if errors.Is(err, sql.ErrNoRows) {
		return 0, fmt.Errorf("%s %s: %w", tb, id, ErrNotFound)
	}
	if err != nil {
		return 0, fmt.Errorf("registry read %s %s: %w", tb, id, err)
	}
	if err := json.Unmarshal([]byte(data), v); err != nil {
		return 0, fmt.Errorf("registry row %s %s is corrupt: %w", tb, id, err)
	}
	return rev, nil
}

// Resolve finds the env or command whose id starts with prefix. It returns
// the kind ("env" or "command") and the full id.
func (d *DB) Resolve(ctx context.Context, prefix string) (kind, id string, err error) {
	if prefix == "" {
		return "", "", fmt.Errorf("empty id: %w", ErrNotFound)
	}
	like := escapeLike(prefix) + "%"
	var matches [][2]string
	for _, tb := range []table{envsTable, commandsTable} {
		rows, err := d.db.QueryContext(ctx, "SELECT id FROM "+string(tb)+" WHERE id LIKE ? ESCAPE '\\' LIMIT 3", like)
		if err != nil {
			return "", "", fmt.Errorf("registry: %w", err)
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				rows.Close()
				return "", "", err
			}
			k := "env"
			if tb == commandsTable {
				k = "command"
			}
			if s == prefix {
				rows.Close()
				return k, s, nil
			}
			matches = append(matches, [2]string{k, s})
		}
		rows.Close()
	}
	switch len(matches) {
	case 0:
		return "", "", fmt.Errorf("no environment or command has an id starting with %q: %w", prefix, ErrNotFound)
	case 1:
		return matches[0][0], matches[0][1], nil
	}
	return "", "", fmt.Errorf("%q matches %s and %s: %w (type more characters)", prefix, matches[0][1], matches[1][1], ErrAmbiguous)
}

func escapeLike(s string) string {
	out := make([]byte, 0, len(s))
	for i := 0; i < len(s); i++ {
		if s[i] == '%' || s[i] == '_' || s[i] == '\\' {
			out = append(out, '\\')
		}
		out = append(out, s[i])
	}
	return string(out)
}
