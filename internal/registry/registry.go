package registry

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/mattn/go-sqlite3" // also registers the "sqlite3" driver
	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/lockfile"
)

// Sentinel errors; compare with errors.Is. They wrap the api sentinels of
// the same meaning, so an engine error tests as both.
var (
	// ErrNotFound: no row has that id.
	ErrNotFound = fmt.Errorf("registry: %w", api.ErrNotFound)
	// ErrConflict: the row's revision changed since it was read, or a
	// precondition of the batch no longer holds. Re-read and decide again.
	ErrConflict = fmt.Errorf("registry: %w", api.ErrConflict)
	// ErrNewerSchema: the database was written by a newer hostfork.
	ErrNewerSchema = fmt.Errorf("registry schema is newer than this hostfork: %w", api.ErrStore)
	// ErrFull: the store's filesystem is full; nothing could be recorded.
	ErrFull = fmt.Errorf("registry: %w", api.ErrStoreFull)
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
	// (see Commit).
	writing chan struct{}
	// writers is registry.lock, whose writerLockByte every Commit holds
	// (an open-file-description lock) around its transaction: writers of
	// all processes queue in the kernel (see Commit). Nil read-only.
	writers  *os.File
	lockPath string
}

// writerLockByte is the byte of registry.lock that writers lock. The
// whole-file flock of a new registry's set-up is independent of it (Linux
// keeps flock and fcntl locks apart).
const writerLockByte = 1 << 20

// FileName is the registry's file name inside the store root.
const FileName = "registry.sqlite"

// Open opens (creating and migrating if needed) root/registry.sqlite. The
// database file is created with mode 0600 (SQLite gives its -wal and -shm
// files the database's mode) and an existing one is tightened to 0600.
// The caller has checked that root is the store's own directory.
func Open(ctx context.Context, root string) (*DB, error) {
	if registerErr != nil {
		return nil, registerErr
	}
	path := filepath.Join(root, FileName)
	// A new registry (no WAL yet) is switched to WAL and given its schema
	// by one process at a time: the switch needs the database to itself,
	// and SQLite answers a concurrent opener "database is locked" at once,
	// without waiting, in some of its steps.
	held := false
	if _, err := os.Lstat(path + "-wal"); errors.Is(err, os.ErrNotExist) {
		l, err := lockfile.Acquire(ctx, filepath.Join(root, "registry.lock"))
		if err != nil {
			return nil, err
		}
		defer l.Release()
		held = true
	}
	if err := ensurePrivate(path); err != nil {
		return nil, err
	}
	q := url.Values{}
	q.Set("_journal_mode", "WAL")
	q.Set("_busy_timeout", "30000")
	q.Set("_txlock", "immediate")
	q.Set("_synchronous", "FULL")
	q.Set("vfs", vfsName)
	q.Set("hostfork_registry", "1") // hf_conn_init's settings (driver.go)
	q.Set("_foreign_keys", "1")
	q.Set("_stmt_cache_size", strconv.Itoa(stmtCacheSize))
	sdb, err := sql.Open(driverName, "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, fmt.Errorf("opening registry %s: %w", path, err)
	}
	sdb.SetMaxOpenConns(4)
	sdb.SetMaxIdleConns(4)
	sdb.SetConnMaxIdleTime(0)
	lockPath := filepath.Join(root, "registry.lock")
	writers, err := lockfile.Open(lockPath)
	if err != nil {
		sdb.Close()
		return nil, err
	}
	d := &DB{db: sdb, path: path, writing: make(chan struct{}, 1), writers: writers, lockPath: lockPath}
	if err := d.migrate(ctx, root, held); err != nil {
		sdb.Close()
		writers.Close()
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

// ensurePrivate creates the database file 0600 if it is missing and
// tightens the modes of the database and its WAL files otherwise.
func ensurePrivate(path string) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_RDWR|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0o600)
	if err == nil {
		return f.Close()
	}
	if !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("creating registry %s: %w", path, err)
	}
	for _, p := range []string{path, path + "-wal", path + "-shm", path + "-journal"} {
		f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return fmt.Errorf("registry %s: %w (it must be a regular file owned by the store's owner)", p, err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err == nil && st.Mode&0o077 != 0 {
			err = unix.Fchmod(int(f.Fd()), uint32(st.Mode&0o700))
			if err != nil {
				f.Close()
				return fmt.Errorf("tightening %s to 0600: %w", p, err)
			}
		}
		f.Close()
	}
	return nil
}

// openFull opens the registry for reading only, on a full filesystem.
func openFull(ctx context.Context, path string) (*DB, error) {
	sdb, err := sql.Open(driverName, "file:"+path+"?mode=ro&immutable=1")
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
func (d *DB) Close() error {
	// A commit in flight holds d.writing and uses d.writers: close the
	// lock file after it (later commits find the database closed).
	d.writing <- struct{}{}
	if d.writers != nil {
		d.writers.Close()
		d.writers = nil
	}
	<-d.writing
	return d.db.Close()
}

// writerWait bounds a wait for the writers' lock: a holder stuck that long
// (stopped, in a debugger, in a hung fsync) is waited for in SQLite's own
// lock instead, whose busy timeout turns it into an error.
const writerWait = 30 * time.Second

// ofdLock sets or clears the writers' lock through fd (F_OFD_SETLK or
// F_OFD_SETLKW).
func ofdLock(fd uintptr, cmd int, typ int16) error {
	fl := unix.Flock_t{Type: typ, Whence: io.SeekStart, Start: writerLockByte, Len: 1}
	for {
		err := unix.FcntlFlock(fd, cmd, &fl)
		if err != unix.EINTR {
			return err
		}
	}
}

// queueWriter waits for this process's turn to write (d.writing) and then
// for the writers' lock every process queues on (lockWriters); the
// function it returns lets go of both.
func (d *DB) queueWriter(ctx context.Context) (func(), error) {
	select {
	case d.writing <- struct{}{}:
	case <-ctx.Done():
		return nil, fmt.Errorf("registry: %w", ctx.Err())
	}
	unlock, err := d.lockWriters(ctx)
	if err != nil {
		<-d.writing
		return nil, err
	}
	return func() { unlock(); <-d.writing }, nil
}

// lockWriters takes the writers' lock of registry.lock, waiting in the
// kernel (woken the moment the holder lets go) until ctx ends or
// writerWait passes. Where the kernel or the filesystem has no OFD locks,
// and after writerWait, the commit goes on to SQLite's own lock, which
// serializes writers by itself. The caller holds d.writing.
func (d *DB) lockWriters(ctx context.Context) (func(), error) {
	none := func() {}
	if d.writers == nil {
		return none, nil
	}
	fd := d.writers.Fd()
	err := ofdLock(fd, unix.F_OFD_SETLK, unix.F_WRLCK)
	if err == nil {
		return func() { _ = ofdLock(fd, unix.F_OFD_SETLK, unix.F_UNLCK) }, nil
	}
	if err != unix.EAGAIN && err != unix.EACCES {
		return none, nil // no OFD locks here: SQLite's lock alone
	}
	// Wait through an open file description of this wait's own: a waiter
	// that gives up may still get the lock afterwards, and then it must
	// hold (and release, by closing) only its own, never the lock a later
	// commit of this handle took.
	f, err := os.OpenFile(d.lockPath, os.O_RDWR|syscall.O_NOFOLLOW|syscall.O_CLOEXEC, 0)
	if err != nil {
		return none, nil
	}
	got := make(chan error, 1)
	go func() { got <- ofdLock(f.Fd(), unix.F_OFD_SETLKW, unix.F_WRLCK) }()
	abandon := func() {
		go func() {
			<-got
			f.Close() // the lock, if it was granted, goes with the description
		}()
	}
	timer := time.NewTimer(writerWait)
	defer timer.Stop()
	select {
	case err := <-got:
		if err != nil {
			f.Close()
			return none, nil
		}
		return func() { f.Close() }, nil
	case <-ctx.Done():
		abandon()
		return nil, fmt.Errorf("registry: %w", ctx.Err())
	case <-timer.C:
		abandon()
		return none, nil
	}
}

// Checkpoint folds the WAL into the database file and starts the WAL
// again from its beginning, in place (PRAGMA wal_checkpoint(RESTART), then
// restartWAL). Reap and gc call it; ordinary launches leave it to SQLite's
// automatic checkpoints. The WAL file keeps its size, so the commits that
// follow overwrite it instead of allocating blocks again (decision 73). A
// WAL grown past walTruncateBytes (a reader held back the automatic
// checkpoints) is truncated to nothing instead (TRUNCATE).
func (d *DB) Checkpoint(ctx context.Context) error {
	if d.full {
		return nil
	}
	mode := "RESTART"
	if st, err := os.Stat(d.path + "-wal"); err == nil && st.Size() > walTruncateBytes {
		mode = "TRUNCATE"
	}
	var busy, frames, backfilled int
	if err := d.db.QueryRowContext(ctx, "PRAGMA wal_checkpoint("+mode+")").Scan(&busy, &frames, &backfilled); err != nil {
		return classify(err)
	}
	if mode == "TRUNCATE" || busy != 0 || frames <= 0 || backfilled != frames {
		return nil
	}
	return d.restartWAL(ctx)
}

// restartWAL makes the WAL file itself start again after a complete
// checkpoint, with one write: the schema version written back, one frame
// at the file's start under a new header. SQLite notes a restart only in
// the shared index (-shm), and the next writer rewrites the file's header.
// Without this write the next hostfork process, which rebuilds the index
// from the file (it is the first to map it), would read every frame of
// the checkpointed WAL as valid again, append after them, and copy them
// into the database a second time; and the new header's sync would be a
// run's instead of reap's or gc's.
func (d *DB) restartWAL(ctx context.Context) error {
	var b Batch
	b.add(func(t *txn) error {
		var v int
		if err := t.tx.QueryRowContext(t.ctx, "PRAGMA user_version").Scan(&v); err != nil {
			return err
		}
		_, err := t.tx.ExecContext(t.ctx, fmt.Sprintf("PRAGMA user_version = %d", v))
		return err
	})
	return d.Commit(ctx, &b)
}

// walTruncateBytes is the WAL size past which Checkpoint truncates it,
// about five times what the automatic checkpoint lets it reach
// (autocheckpointPages frames and the commit that crossed the threshold,
// 4,120 bytes a frame).
const walTruncateBytes = 4 << 20

// Version reports the schema version stored in the database.
func (d *DB) Version(ctx context.Context) (int, error) {
	var v int
	err := d.db.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v)
	return v, err
}

// checkVersion refuses a schema this hostfork can't read: a newer one, or
// a negative one (no hostfork writes it: the file is damaged or not ours).
func checkVersion(path string, v int) error {
	switch {
	case v < 0:
		return fmt.Errorf("%s has schema version %d, which no hostfork writes: the registry is damaged or not hostfork's; restore it from a backup, or move the store aside and start a new one: %w", path, v, api.ErrStore)
	case v > SchemaVersion:
		return fmt.Errorf("%s has schema %d, this hostfork knows %d: %w (use the hostfork that wrote it)", path, v, SchemaVersion, ErrNewerSchema)
	}
	return nil
}

// migrate brings the schema up to date. The first open of a new store by
// many processes at once is serialized by an flock on registry.lock, because
// switching to WAL mode needs the database to itself.
func (d *DB) migrate(ctx context.Context, root string, locked bool) error {
	// Fast path: an up-to-date registry. A read that fails (another
	// process is switching a new store to WAL) is retried under the lock.
	if v, err := d.Version(ctx); err == nil {
		if v == SchemaVersion {
			return nil
		}
		if err := checkVersion(d.path, v); err != nil {
			return err
		}
	}
	if !locked {
		l, err := lockfile.Acquire(ctx, filepath.Join(root, "registry.lock"))
		if err != nil {
			return err
		}
		defer l.Release()
	}
	tx, err := d.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrating registry: %w", classify(err))
	}
	defer tx.Rollback()
	var v int
	if err := tx.QueryRowContext(ctx, "PRAGMA user_version").Scan(&v); err != nil {
		return fmt.Errorf("reading registry schema version of %s: %w", d.path, classify(err))
	}
	if err := checkVersion(d.path, v); err != nil {
		return err
	}
	for ; v < SchemaVersion; v++ {
		m := migrations[v]
		if m.sql != "" {
			if _, err := tx.ExecContext(ctx, m.sql); err != nil {
				return fmt.Errorf("registry migration %d: %w", v+1, classify(err))
			}
		}
		if m.fn != nil {
			if err := m.fn(ctx, tx); err != nil {
				return fmt.Errorf("registry migration %d: %w", v+1, classify(err))
			}
		}
	}
	if _, err := tx.ExecContext(ctx, fmt.Sprintf("PRAGMA user_version = %d", SchemaVersion)); err != nil {
		return err
	}
	return classify(tx.Commit())
}

// Resolve finds the env or command whose id starts with prefix. It returns
// the kind ("env" or "command") and the full id. An exact match wins.
func (d *DB) Resolve(ctx context.Context, prefix string) (kind, id string, err error) {
	if prefix == "" {
		return "", "", fmt.Errorf("empty id: %w", ErrNotFound)
	}
	// Ids are lowercase ASCII; the prefix is matched as LIKE once did,
	// without regard to ASCII case. The first ids at or after the prefix
	// in the primary key's order are the ones that start with it: an index
	// range, where a LIKE scanned every row of the table.
	prefix = strings.ToLower(prefix)
	var matches [][2]string
	for _, tb := range []string{"envs", "commands"} {
		rows, err := d.db.QueryContext(ctx, "SELECT id FROM "+tb+" WHERE id >= ? ORDER BY id LIMIT 3", prefix)
		if err != nil {
			return "", "", fmt.Errorf("registry: %w", err)
		}
		k := "env"
		if tb == "commands" {
			k = "command"
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				rows.Close()
				return "", "", err
			}
			if s == prefix {
				rows.Close()
				return k, s, nil
			}
			if !strings.HasPrefix(s, prefix) {
				break
			}
			matches = append(matches, [2]string{k, s})
		}
		err = rows.Err()
		rows.Close()
		if err != nil {
			return "", "", fmt.Errorf("registry: %w", err)
		}
	}
	switch len(matches) {
	case 0:
		return "", "", fmt.Errorf("no environment or command has an id starting with %q: %w", prefix, ErrNotFound)
	case 1:
		return matches[0][0], matches[0][1], nil
	}
	names := make([]string, 0, len(matches))
	for _, m := range matches {
		names = append(names, m[1])
	}
	const most = 5
	var list string
	if len(names) > most {
		list = strings.Join(names[:most], ", ") + fmt.Sprintf(" and %d more", len(names)-most)
	} else {
		list = strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
	}
	return "", "", fmt.Errorf("%q matches %s: %w (type more characters)", prefix, list, api.ErrAmbiguous)
}

// Setting reads a store-wide setting; ok is false when unset.
func (d *DB) Setting(ctx context.Context, key string) (value string, ok bool, err error) {
	err = d.db.QueryRowContext(ctx, "SELECT value FROM settings WHERE key = ?", key).Scan(&value)
	if errors.Is(err, sql.ErrNoRows) {
		return "", false, nil
	}
	return value, err == nil, err
}
