package registry

/*
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
// sqlite3_db_config is provided by github.com/mattn/go-sqlite3's bundled
// SQLite, linked into the same binary. It is variadic, so it is called
// from C.
typedef struct sqlite3 sqlite3;
extern int sqlite3_db_config(sqlite3 *, int op, ...);
static int hf_no_ckpt_on_close(void *db) {
	int on = -1;
	// SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE = 1006
	if (sqlite3_db_config((sqlite3 *)db, 1006, 1, &on) != 0)
		return -1;
	return on;
}

// The automatic checkpoint, with the WAL's restart made to reach the file
// (decision 73). SQLite's own (sqlite3_wal_autocheckpoint) checkpoints
// after a commit that left the WAL at or past the threshold, and notes
// the restart only in the WAL's shared index; the file's header gets its
// new salts from the next write. When that commit is a process's last
// (a run's result), the next process, which rebuilds the index from the
// file, reads the checkpointed frames as valid again, appends after them
// and checkpoints them a second time: in a store in steady use a run of
// four syncs was followed by one of five, two checkpoints in three. This
// hook checkpoints the same way and, when the checkpoint folded in the
// whole WAL, writes the schema version back in a transaction of its own
// (one frame), which restarts the file itself. It never waits: with the
// busy handler off, a lock another connection holds leaves the restart
// to that writer, as before. SQLite lets a WAL hook read, write and
// checkpoint the database (sqlite3_wal_hook).
typedef struct sqlite3_stmt sqlite3_stmt;
extern void *sqlite3_wal_hook(sqlite3 *, int (*)(void *, sqlite3 *, const char *, int), void *);
extern int sqlite3_wal_checkpoint_v2(sqlite3 *, const char *, int, int *, int *);
extern int sqlite3_exec(sqlite3 *, const char *, int (*)(void *, int, char **, char **), void *, char **);
extern int sqlite3_busy_timeout(sqlite3 *, int);
extern int sqlite3_busy_handler(sqlite3 *, int (*)(void *, int), void *);
extern int sqlite3_prepare_v2(sqlite3 *, const char *, int, sqlite3_stmt **, const char **);
extern int sqlite3_step(sqlite3_stmt *);
extern int sqlite3_column_int(sqlite3_stmt *, int);
extern int sqlite3_finalize(sqlite3_stmt *);

static _Thread_local int hf_in_restart;
static long hf_wal_restarts; // restart writes made (tests)
extern int sqlite3_get_autocommit(sqlite3 *);

static int hf_read_int(sqlite3 *db, const char *q, int *v)
{
	sqlite3_stmt *st = 0;
	int rc = sqlite3_prepare_v2(db, q, -1, &st, 0);
	if (rc == 0) {
		rc = sqlite3_step(st) == 100 ? 0 : 1; // SQLITE_ROW
		if (rc == 0)
			*v = sqlite3_column_int(st, 0);
	}
	sqlite3_finalize(st);
	return rc;
}

static int hf_restart_file(sqlite3 *db)
{
	int busy = 0, v = 0, done = -1;
	char q[64];
	if (hf_read_int(db, "PRAGMA busy_timeout", &busy) != 0)
		return -1;
	sqlite3_busy_handler(db, 0, 0);
	if (sqlite3_exec(db, "BEGIN IMMEDIATE", 0, 0, 0) == 0) {
		int rc = hf_read_int(db, "PRAGMA user_version", &v);
		if (rc == 0) {
			snprintf(q, sizeof q, "PRAGMA user_version=%d", v);
			rc = sqlite3_exec(db, q, 0, 0, 0);
		}
		if (rc == 0 && sqlite3_exec(db, "COMMIT", 0, 0, 0) == 0) {
			__atomic_add_fetch(&hf_wal_restarts, 1, __ATOMIC_RELAXED);
			done = 0;
		}
	}
	// Whatever failed, the connection goes back as it came: no
	// transaction open, its own busy timeout.
	for (int i = 0; i < 3 && !sqlite3_get_autocommit(db); i++)
		sqlite3_exec(db, "ROLLBACK", 0, 0, 0);
	sqlite3_busy_timeout(db, busy);
	return done;
}
static int hf_restart_wal(void *db)
{
	hf_in_restart = 1;
	int rc = hf_restart_file((sqlite3 *)db);
	hf_in_restart = 0;
	return rc;
}

// arg is the threshold, in frames, as for SQLite's own hook.
static int hf_wal_hook(void *arg, sqlite3 *db, const char *zdb, int frames)
{
	if (hf_in_restart || frames < (int)(intptr_t)arg)
		return 0;
	int log = 0, done = 0;
	// SQLITE_CHECKPOINT_PASSIVE, as sqlite3_wal_autocheckpoint's.
	if (sqlite3_wal_checkpoint_v2(db, zdb, 0, &log, &done) == 0 && log > 0 && done == log)
		hf_restart_wal(db);
	return 0; // anything else would make the COMMIT report an error
}

static void hf_install_wal_hook(void *db, int pages)
{
	sqlite3_wal_hook((sqlite3 *)db, hf_wal_hook, (void *)(intptr_t)pages);
}
static long hf_restarts(void) { return __atomic_load_n(&hf_wal_restarts, __ATOMIC_RELAXED); }
extern sqlite3_stmt *sqlite3_next_stmt(sqlite3 *, sqlite3_stmt *);
static int hf_live_stmts(void *db) {
	int n = 0;
	for (sqlite3_stmt *s = sqlite3_next_stmt((sqlite3 *)db, 0); s; s = sqlite3_next_stmt((sqlite3 *)db, s))
		n++;
	return n;
}

// A VFS that is the default one ("unix") with two changes to its WAL
// files (decisions 48 and 73). The declarations are SQLite's public,
// versioned ABI (sqlite3.h).
//
//   - An existing WAL file is opened without SQLITE_OPEN_CREATE. SQLite
//     fsyncs the directory on the first sync of every journal it opened
//     with CREATE, i.e. once in every process; the WAL of a hostfork store
//     is created once and kept (no checkpoint on close), so that directory
//     fsync is one per CLI call for nothing. A WAL that is missing, or gone
//     in between, is opened (and its directory synced) as before.
//   - A WAL's sync is fdatasync(2), not fsync(2). The build of SQLite the
//     driver bundles has no HAVE_FDATASYNC, so it syncs every file with
//     fsync, which also writes the inode when only its times changed: on
//     a journaled ext4 that is a journal commit (two writes and cache
//     flushes more) on every durable commit of the registry, although the
//     WAL is rewritten in place after each checkpoint and keeps its size.
//     SQLite's own rule (os_unix.c, full_fsync) is that fdatasync is always
//     adequate for it: it makes the data and the size durable, and SQLite
//     needs nothing else of the inode. The sync goes through a descriptor
//     of the shim's own, opened read-only on the same path: syncs act on
//     the file, not on the descriptor, and the unix VFS's descriptor is
//     private to it. The path names the same file: SQLite opens a WAL
//     while it holds a shared lock on the database, and a connection
//     deletes a WAL only when it is the last one, under an exclusive lock.
//     A WAL takes no POSIX lock (those are on the database and its -shm),
//     so closing that second descriptor releases nothing.
//     The first sync of a WAL this process created stays the unix VFS's,
//     which also syncs the directory. The main database and every other
//     file keep the unix VFS's methods unchanged.
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>
typedef long long sqlite3_int64;
typedef struct sqlite3_file sqlite3_file;
typedef struct sqlite3_io_methods sqlite3_io_methods;
struct sqlite3_file {
	const sqlite3_io_methods *pMethods;
};
struct sqlite3_io_methods {
	int iVersion;
	int (*xClose)(sqlite3_file *);
	int (*xRead)(sqlite3_file *, void *, int, sqlite3_int64);
	int (*xWrite)(sqlite3_file *, const void *, int, sqlite3_int64);
	int (*xTruncate)(sqlite3_file *, sqlite3_int64);
	int (*xSync)(sqlite3_file *, int);
	int (*xFileSize)(sqlite3_file *, sqlite3_int64 *);
	int (*xLock)(sqlite3_file *, int);
	int (*xUnlock)(sqlite3_file *, int);
	int (*xCheckReservedLock)(sqlite3_file *, int *);
	int (*xFileControl)(sqlite3_file *, int, void *);
	int (*xSectorSize)(sqlite3_file *);
	int (*xDeviceCharacteristics)(sqlite3_file *);
	int (*xShmMap)(sqlite3_file *, int, int, int, void volatile **);
	int (*xShmLock)(sqlite3_file *, int, int, int);
	void (*xShmBarrier)(sqlite3_file *);
	int (*xShmUnmap)(sqlite3_file *, int);
	int (*xFetch)(sqlite3_file *, sqlite3_int64, int, void **);
	int (*xUnfetch)(sqlite3_file *, sqlite3_int64, void *);
};
typedef struct sqlite3_vfs sqlite3_vfs;
typedef void (*sqlite3_syscall_ptr)(void);
struct sqlite3_vfs {
	int iVersion;
	int szOsFile;
	int mxPathname;
	sqlite3_vfs *pNext;
	const char *zName;
	void *pAppData;
	int (*xOpen)(sqlite3_vfs *, const char *, sqlite3_file *, int, int *);
	int (*xDelete)(sqlite3_vfs *, const char *, int);
	int (*xAccess)(sqlite3_vfs *, const char *, int, int *);
	int (*xFullPathname)(sqlite3_vfs *, const char *, int, char *);
	void *(*xDlOpen)(sqlite3_vfs *, const char *);
	void (*xDlError)(sqlite3_vfs *, int, char *);
	void (*(*xDlSym)(sqlite3_vfs *, void *, const char *))(void);
	void (*xDlClose)(sqlite3_vfs *, void *);
	int (*xRandomness)(sqlite3_vfs *, int, char *);
	int (*xSleep)(sqlite3_vfs *, int);
	int (*xCurrentTime)(sqlite3_vfs *, double *);
	int (*xGetLastError)(sqlite3_vfs *, int, char *);
	int (*xCurrentTimeInt64)(sqlite3_vfs *, long long *);
	int (*xSetSystemCall)(sqlite3_vfs *, const char *, sqlite3_syscall_ptr);
	sqlite3_syscall_ptr (*xGetSystemCall)(sqlite3_vfs *, const char *);
	const char *(*xNextSystemCall)(sqlite3_vfs *, const char *);
};
extern sqlite3_vfs *sqlite3_vfs_find(const char *);
extern int sqlite3_vfs_register(sqlite3_vfs *, int);

#define HF_OPEN_CREATE 0x00000004
#define HF_OPEN_WAL 0x00080000
#define HF_IOERR_FSYNC (10 | (4 << 8))

static sqlite3_vfs hf_vfs;
static sqlite3_vfs *hf_base;

// hf_wal is a WAL file of the shim: its own header, then the unix VFS's
// file (real) in the rest of the szOsFile bytes SQLite allocated.
typedef struct hf_wal {
	sqlite3_file file;  // pMethods: hf_wal_methods
	sqlite3_file *real; // the unix VFS's file, after this header
	const char *name;   // SQLite's, valid until xClose
	int fd;             // the shim's descriptor for fdatasync; -1: none
	int created;        // opened with CREATE and not synced yet
} hf_wal;

// The syncs made with fdatasync and those left to the unix VFS (tests).
static long hf_wal_datasyncs, hf_wal_basesyncs;
extern void sqlite3_log(int, const char *, ...);

#define HF_REAL(f) (((hf_wal *)(f))->real)
#define HF_RM(f) (HF_REAL(f)->pMethods)

static int hf_wal_close(sqlite3_file *f)
{
	hf_wal *w = (hf_wal *)f;
	if (w->fd >= 0) {
		close(w->fd);
		w->fd = -1;
	}
	return HF_RM(f)->xClose(w->real);
}
static int hf_wal_read(sqlite3_file *f, void *b, int n, sqlite3_int64 o) { return HF_RM(f)->xRead(HF_REAL(f), b, n, o); }
static int hf_wal_write(sqlite3_file *f, const void *b, int n, sqlite3_int64 o) { return HF_RM(f)->xWrite(HF_REAL(f), b, n, o); }
static int hf_wal_truncate(sqlite3_file *f, sqlite3_int64 n) { return HF_RM(f)->xTruncate(HF_REAL(f), n); }
static int hf_wal_sync(sqlite3_file *f, int flags)
{
	hf_wal *w = (hf_wal *)f;
	if (w->fd < 0 || w->created) {
		int rc = HF_RM(f)->xSync(w->real, flags);
		if (rc == 0)
			w->created = 0;
		__atomic_add_fetch(&hf_wal_basesyncs, 1, __ATOMIC_RELAXED);
		return rc;
	}
	int rc;
	do
		rc = fdatasync(w->fd);
	while (rc != 0 && errno == EINTR);
	if (rc != 0) {
		int e = errno;
		sqlite3_log(HF_IOERR_FSYNC, "fdatasync of %s: errno %d", w->name, e);
		errno = e; // for sqlite3_system_errno
		return HF_IOERR_FSYNC;
	}
	__atomic_add_fetch(&hf_wal_datasyncs, 1, __ATOMIC_RELAXED);
	return 0;
}
static int hf_wal_size(sqlite3_file *f, sqlite3_int64 *n) { return HF_RM(f)->xFileSize(HF_REAL(f), n); }
static int hf_wal_lock(sqlite3_file *f, int l) { return HF_RM(f)->xLock(HF_REAL(f), l); }
static int hf_wal_unlock(sqlite3_file *f, int l) { return HF_RM(f)->xUnlock(HF_REAL(f), l); }
static int hf_wal_reserved(sqlite3_file *f, int *r) { return HF_RM(f)->xCheckReservedLock(HF_REAL(f), r); }
static int hf_wal_fcntl(sqlite3_file *f, int op, void *a) { return HF_RM(f)->xFileControl(HF_REAL(f), op, a); }
static int hf_wal_sector(sqlite3_file *f) { return HF_RM(f)->xSectorSize(HF_REAL(f)); }
static int hf_wal_devchar(sqlite3_file *f) { return HF_RM(f)->xDeviceCharacteristics(HF_REAL(f)); }
static int hf_wal_shmmap(sqlite3_file *f, int p, int s, int e, void volatile **pp) { return HF_RM(f)->xShmMap(HF_REAL(f), p, s, e, pp); }
static int hf_wal_shmlock(sqlite3_file *f, int o, int n, int fl) { return HF_RM(f)->xShmLock(HF_REAL(f), o, n, fl); }
static void hf_wal_shmbarrier(sqlite3_file *f) { HF_RM(f)->xShmBarrier(HF_REAL(f)); }
static int hf_wal_shmunmap(sqlite3_file *f, int d) { return HF_RM(f)->xShmUnmap(HF_REAL(f), d); }
static int hf_wal_fetch(sqlite3_file *f, sqlite3_int64 o, int n, void **pp) { return HF_RM(f)->xFetch(HF_REAL(f), o, n, pp); }
static int hf_wal_unfetch(sqlite3_file *f, sqlite3_int64 o, void *p) { return HF_RM(f)->xUnfetch(HF_REAL(f), o, p); }

// One table per version of the unix VFS's methods (SQLite reads a method
// only where the table's iVersion says it is there), with the shared-
// memory methods or without them (NULL, as in the unix VFS's WAL files:
// SQLite maps shared memory on the database's file only).
static sqlite3_io_methods hf_wal_methods[3][2];

static int hf_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *out)
{
	(void)vfs;
	if (!name || !(flags & HF_OPEN_WAL))
		return hf_base->xOpen(hf_base, name, f, flags, out);
	hf_wal *w = (hf_wal *)f;
	sqlite3_file *real = (sqlite3_file *)((char *)f + ((sizeof(hf_wal) + 15) & ~(size_t)15));
	memset(real, 0, (size_t)hf_base->szOsFile);
	w->file.pMethods = 0;
	w->real = real;
	w->fd = -1;
	w->created = 0;
	int rc = -1;
	if ((flags & HF_OPEN_CREATE) && access(name, F_OK) == 0)
		rc = hf_base->xOpen(hf_base, name, real, flags & ~HF_OPEN_CREATE, out);
	if (rc != 0) {
		if (real->pMethods) {
			real->pMethods->xClose(real);
			memset(real, 0, (size_t)hf_base->szOsFile);
		}
		rc = hf_base->xOpen(hf_base, name, real, flags, out);
		w->created = (flags & HF_OPEN_CREATE) != 0;
	}
	if (rc != 0) {
		if (real->pMethods)
			real->pMethods->xClose(real);
		return rc;
	}
	int v = real->pMethods->iVersion;
	if (v < 1 || v > 3) {
		// A version this shim doesn't know: the unix VFS's file as it is.
		real->pMethods->xClose(real);
		memset(real, 0, (size_t)hf_base->szOsFile);
		return hf_base->xOpen(hf_base, name, f, flags, out);
	}
	w->name = name;
	w->fd = open(name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	if (w->fd >= 0 && w->fd < 3) {
		// Never 0-2 (SQLite's robust_open rule): a write meant for a
		// standard stream must not reach the WAL's descriptor.
		int fd = fcntl(w->fd, F_DUPFD_CLOEXEC, 3);
		close(w->fd);
		w->fd = fd;
	}
	w->file.pMethods = &hf_wal_methods[v - 1][v >= 2 && real->pMethods->xShmMap != 0];
	return 0;
}

static int hf_register_vfs(void)
{
	hf_base = sqlite3_vfs_find(0);
	if (!hf_base || hf_base->iVersion < 1)
		return -1;
	memset(&hf_vfs, 0, sizeof hf_vfs);
	size_t n = sizeof hf_vfs;
	if (hf_base->iVersion < 3)
		n = hf_base->iVersion == 2 ? offsetof(sqlite3_vfs, xSetSystemCall) : offsetof(sqlite3_vfs, xCurrentTimeInt64);
	memcpy(&hf_vfs, hf_base, n);
	hf_vfs.pNext = 0;
	hf_vfs.zName = "hostfork";
	hf_vfs.szOsFile = (int)((sizeof(hf_wal) + 15) & ~(size_t)15) + hf_base->szOsFile;
	hf_vfs.xOpen = hf_open;
	for (int i = 0; i < 3; i++) {
		for (int shm = 0; shm < 2; shm++) {
			sqlite3_io_methods *m = &hf_wal_methods[i][shm];
			m->iVersion = i + 1;
			m->xClose = hf_wal_close;
			m->xRead = hf_wal_read;
			m->xWrite = hf_wal_write;
			m->xTruncate = hf_wal_truncate;
			m->xSync = hf_wal_sync;
			m->xFileSize = hf_wal_size;
			m->xLock = hf_wal_lock;
			m->xUnlock = hf_wal_unlock;
			m->xCheckReservedLock = hf_wal_reserved;
			m->xFileControl = hf_wal_fcntl;
			m->xSectorSize = hf_wal_sector;
			m->xDeviceCharacteristics = hf_wal_devchar;
			if (i >= 1 && shm) {
				m->xShmMap = hf_wal_shmmap;
				m->xShmLock = hf_wal_shmlock;
				m->xShmBarrier = hf_wal_shmbarrier;
				m->xShmUnmap = hf_wal_shmunmap;
			}
			if (i >= 2) {
				m->xFetch = hf_wal_fetch;
				m->xUnfetch = hf_wal_unfetch;
			}
		}
	}
	return sqlite3_vfs_register(&hf_vfs, 0);
}

static long hf_datasyncs(void) { return __atomic_load_n(&hf_wal_datasyncs, __ATOMIC_RELAXED); }
static long hf_basesyncs(void) { return __atomic_load_n(&hf_wal_basesyncs, __ATOMIC_RELAXED); }
*/
import "C"

import (
	"database/sql"
	"reflect"
	"unsafe"

	"github.com/mattn/go-sqlite3"
)

// driverName is the SQLite driver with hostfork's connection setup.
const driverName = "hostfork-sqlite3"

// vfsName is the VFS the registry opens with ("" the default: the shim
// could not be registered).
var vfsName string

func init() {
	if C.hf_register_vfs() == 0 {
		vfsName = "hostfork"
	}
	sql.Register(driverName, &sqlite3.SQLiteDriver{ConnectHook: func(c *sqlite3.SQLiteConn) error {
		if p := connHandle(c); p != nil {
			C.hf_no_ckpt_on_close(p)
			C.hf_install_wal_hook(p, C.int(autocheckpointPages))
		}
		return nil
	}})
}

// autocheckpointPages is the WAL size, in pages, past which a commit
// checkpoints (SQLite's default is 1000). Every hostfork process is the
// first to map the WAL index (the WAL outlives processes: no checkpoint on
// close), so its first statement rebuilds the index from the whole WAL: a
// 1000-frame WAL took 1.7 ms of each CLI call's start against 0.05 ms for
// an empty one, 1.7 µs a frame. A run writes about 40 frames; at 200 pages
// a checkpoint (a write of the changed pages and an fsync of the database)
// comes every fifth run or so, and the rebuild averages 0.17 ms
// (decision 55).
const autocheckpointPages = 200

// stmtCacheSize is how many prepared statements each connection keeps
// (the driver's _stmt_cache_size, least recently used out first). Without
// it every statement is parsed and compiled anew: a plain run prepared 57
// statements, 26 of them repeats (the intent settlements, the events, the
// BEGIN/COMMIT pairs), and SQLite's parser and code generator were the
// largest part of its SQL time. A cached statement is reset and its
// bindings cleared when it is returned, so it holds no lock and no read
// transaction; SQLite prepares it again by itself if the schema changed
// (sqlite3_prepare_v2). A CLI call uses about 25 distinct statements; a
// long-lived server also makes variants of a few (an IN list per length,
// the filters of a listing), which take their turn in the cache: its size
// bounds the memory, 48 statements and their buffers a connection
// (decision 71).
const stmtCacheSize = 48

// liveStatements counts the prepared statements the connection holds
// (sqlite3_next_stmt): with nothing running, the ones its cache kept.
func liveStatements(c *sqlite3.SQLiteConn) int {
	p := connHandle(c)
	if p == nil {
		return -1
	}
	return int(C.hf_live_stmts(p))
}

// walDataSyncs counts the syncs of a WAL this process made with
// fdatasync (the VFS shim's; decision 73).
func walDataSyncs() int64 { return int64(C.hf_datasyncs()) }

// restartWALFile writes the schema version back, as the automatic
// checkpoint does after it folded in the whole WAL (hf_wal_hook), so that
// the WAL's restart reaches the file. It reports whether the write
// committed; it does not wait for a lock another connection holds, and
// leaves the connection with no transaction and its busy timeout.
func restartWALFile(c *sqlite3.SQLiteConn) bool {
	p := connHandle(c)
	return p != nil && C.hf_restart_wal(p) == 0
}

// walRestarts counts the writes the automatic checkpoint made to restart
// the WAL file (hf_wal_hook).
func walRestarts() int64 { return int64(C.hf_restarts()) }

// walBaseSyncs counts the syncs of a WAL the shim left to the unix VFS:
// the first of a WAL opened with CREATE, which also syncs its directory.
func walBaseSyncs() int64 { return int64(C.hf_basesyncs()) }

// connHandle is the connection's sqlite3 handle, for the settings the
// driver has no option for:
//   - no checkpoint when the last connection of a process closes
//     (SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE): a short-lived hostfork process
//     would otherwise fold the WAL into the database, fsync it and delete
//     the WAL on every exit, and the next one would create it again.
//     Checkpoints are left to the automatic checkpoint (at
//     autocheckpointPages) and to reap and gc (DB.Checkpoint);
//   - the automatic checkpoint itself: hf_wal_hook, at
//     autocheckpointPages, which also restarts the WAL file;
//   - the restart write of DB.Checkpoint (restartWALFile).
//
// The driver does not expose the handle, so it is read from the
// connection's unexported field; if that ever fails (nil), SQLite's
// defaults remain: a checkpoint on close and at 1000 pages, and no
// restart write.
func connHandle(c *sqlite3.SQLiteConn) unsafe.Pointer {
	f := reflect.ValueOf(c).Elem().FieldByName("db")
	if !f.IsValid() || f.Kind() != reflect.Pointer {
		return nil
	}
	return unsafe.Pointer(f.Pointer())
}
