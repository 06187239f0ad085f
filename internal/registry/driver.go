package registry

/*
#include <stddef.h>
#include <stdint.h>
// sqlite3_db_config is provided by github.com/mattn/go-sqlite3's bundled
// SQLite, linked into the same binary. It is variadic, so it is called
// from C.
typedef struct sqlite3 sqlite3;
extern int sqlite3_db_config(sqlite3 *, int op, ...);
extern int sqlite3_wal_autocheckpoint(sqlite3 *, int);
static int hf_no_ckpt_on_close(void *db) {
	int on = -1;
	// SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE = 1006
	if (sqlite3_db_config((sqlite3 *)db, 1006, 1, &on) != 0)
		return -1;
	return on;
}
static int hf_wal_autocheckpoint(void *db, int pages) {
	return sqlite3_wal_autocheckpoint((sqlite3 *)db, pages);
}
typedef struct sqlite3_stmt sqlite3_stmt;
extern sqlite3_stmt *sqlite3_next_stmt(sqlite3 *, sqlite3_stmt *);
static int hf_live_stmts(void *db) {
	int n = 0;
	for (sqlite3_stmt *s = sqlite3_next_stmt((sqlite3 *)db, 0); s; s = sqlite3_next_stmt((sqlite3 *)db, s))
		n++;
	return n;
}

// A VFS that is the default one ("unix") except that it opens an existing
// WAL file without SQLITE_OPEN_CREATE. SQLite fsyncs the directory on the
// first sync of every journal it opened with CREATE, i.e. once in every
// process; the WAL of a hostfork store is created once and kept (no
// checkpoint on close), so that directory fsync is one per CLI call for
// nothing. A WAL that is missing, or gone in between, is opened (and its
// directory synced) as before. The declarations are SQLite's public,
// versioned ABI (sqlite3.h).
#include <string.h>
#include <unistd.h>
typedef struct sqlite3_file sqlite3_file;
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

static sqlite3_vfs hf_vfs;
static sqlite3_vfs *hf_base;

static int hf_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *out)
{
	if (name && (flags & HF_OPEN_WAL) && (flags & HF_OPEN_CREATE) && access(name, F_OK) == 0) {
		int rc = hf_base->xOpen(hf_base, name, f, flags & ~HF_OPEN_CREATE, out);
		if (rc == 0)
			return 0;
	}
	return hf_base->xOpen(hf_base, name, f, flags, out);
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
	hf_vfs.xOpen = hf_open;
	return sqlite3_vfs_register(&hf_vfs, 0);
}
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
			C.hf_wal_autocheckpoint(p, C.int(autocheckpointPages))
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

// connHandle is the connection's sqlite3 handle, for the settings the
// driver has no option for:
//   - no checkpoint when the last connection of a process closes
//     (SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE): a short-lived hostfork process
//     would otherwise fold the WAL into the database, fsync it and delete
//     the WAL on every exit, and the next one would create it again.
//     Checkpoints are left to SQLite's automatic checkpoint (at
//     autocheckpointPages) and to reap and gc (DB.Checkpoint);
//   - the automatic checkpoint's threshold (sqlite3_wal_autocheckpoint).
//
// The driver does not expose the handle, so it is read from the
// connection's unexported field; if that ever fails (nil), SQLite's
// defaults remain: a checkpoint on close and at 1000 pages.
func connHandle(c *sqlite3.SQLiteConn) unsafe.Pointer {
	f := reflect.ValueOf(c).Elem().FieldByName("db")
	if !f.IsValid() || f.Kind() != reflect.Pointer {
		return nil
	}
	return unsafe.Pointer(f.Pointer())
}
