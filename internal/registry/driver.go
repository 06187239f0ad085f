package registry

/*
// The registry's connection settings and its VFS, through SQLite's public,
// versioned C API (sqlite3.h), which the driver's bundled SQLite exports
// into the same binary. The driver gives Go no handle of a connection, and
// its compile flags are its own package's (a #cgo CFLAGS line here does not
// reach its amalgamation), so both are set up from C (decisions 48, 73).
#include <stddef.h>
#include <string.h>
#include <unistd.h>

typedef struct sqlite3 sqlite3;
typedef struct sqlite3_context sqlite3_context;
typedef struct sqlite3_value sqlite3_value;
typedef struct sqlite3_stmt sqlite3_stmt;
typedef struct sqlite3_file sqlite3_file;
typedef struct sqlite3_io_methods sqlite3_io_methods;
struct sqlite3_io_methods { // its first members
	int iVersion;
	int (*xClose)(sqlite3_file *);
};
struct sqlite3_file {
	const sqlite3_io_methods *pMethods;
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
extern int sqlite3_auto_extension(void (*)(void));
extern int sqlite3_db_config(sqlite3 *, int, ...);
extern const char *sqlite3_db_filename(sqlite3 *, const char *);
extern int sqlite3_uri_boolean(const char *, const char *, int);
extern int sqlite3_create_function(sqlite3 *, const char *, int, int, void *,
	void (*)(sqlite3_context *, int, sqlite3_value **),
	void (*)(sqlite3_context *, int, sqlite3_value **), void (*)(sqlite3_context *));
extern sqlite3 *sqlite3_context_db_handle(sqlite3_context *);
extern sqlite3_stmt *sqlite3_next_stmt(sqlite3 *, sqlite3_stmt *);
extern void sqlite3_result_int(sqlite3_context *, int);

#define HF_OPEN_CREATE 0x00000004       // SQLITE_OPEN_CREATE
#define HF_OPEN_WAL 0x00080000          // SQLITE_OPEN_WAL
#define HF_NO_CKPT_ON_CLOSE 1006        // SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE
#define HF_UTF8_DIRECTONLY (1 | 0x80000) // SQLITE_UTF8 | SQLITE_DIRECTONLY

// The "hostfork" VFS is the default one except that an existing WAL is
// opened without SQLITE_OPEN_CREATE. SQLite syncs the directory at the
// first sync of every journal it opened with CREATE, which is once in
// every process: a hostfork store's WAL is created once and kept (no
// checkpoint on close), so that sync is one per CLI call for nothing. A
// WAL that is missing, or gone in between, is opened (and its directory
// synced) as before.
static sqlite3_vfs hf_vfs;
static sqlite3_vfs *hf_base;

static int hf_open(sqlite3_vfs *vfs, const char *name, sqlite3_file *f, int flags, int *out)
{
	(void)vfs;
	if (name && (flags & HF_OPEN_WAL) && (flags & HF_OPEN_CREATE) && access(name, F_OK) == 0) {
		if (hf_base->xOpen(hf_base, name, f, flags & ~HF_OPEN_CREATE, out) == 0)
			return 0;
		// A failed open that set pMethods must still be closed (sqlite3.h).
		if (f->pMethods)
			f->pMethods->xClose(f);
		f->pMethods = 0;
	}
	return hf_base->xOpen(hf_base, name, f, flags, out);
}

// hf_statements is the SQL function hostfork_statements(): the prepared
// statements the connection holds, itself included (for the statement
// cache's test).
static void hf_statements(sqlite3_context *ctx, int argc, sqlite3_value **argv)
{
	(void)argc, (void)argv;
	sqlite3 *db = sqlite3_context_db_handle(ctx);
	int n = 0;
	for (sqlite3_stmt *s = sqlite3_next_stmt(db, 0); s; s = sqlite3_next_stmt(db, s))
		n++;
	sqlite3_result_int(ctx, n);
}

// hf_conn_init runs at the open of every SQLite connection of the process
// (sqlite3_auto_extension) and sets up the registry's, those whose URI
// says hostfork_registry=1, with what no PRAGMA sets: no checkpoint when
// the last connection of a process closes. A short-lived hostfork process
// would otherwise fold the WAL into the database, sync both and delete the
// WAL on every exit, and the next one would create it again (decision 38).
static int hf_conn_init(sqlite3 *db, char **err, const void *api)
{
	(void)err, (void)api;
	if (!sqlite3_uri_boolean(sqlite3_db_filename(db, "main"), "hostfork_registry", 0))
		return 0;
	sqlite3_db_config(db, HF_NO_CKPT_ON_CLOSE, 1, (int *)0);
	sqlite3_create_function(db, "hostfork_statements", 0, HF_UTF8_DIRECTONLY, 0, hf_statements, 0, 0);
	return 0;
}

static int hf_register(void)
{
	if (sqlite3_auto_extension((void (*)(void))hf_conn_init) != 0)
		return -1;
	hf_base = sqlite3_vfs_find(0);
	if (!hf_base)
		return -1;
	size_t n = sizeof hf_vfs; // the fields of the base's version only
	if (hf_base->iVersion < 2)
		n = offsetof(sqlite3_vfs, xCurrentTimeInt64);
	else if (hf_base->iVersion < 3)
		n = offsetof(sqlite3_vfs, xSetSystemCall);
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
	"errors"
	"strconv"

	"github.com/mattn/go-sqlite3"
)

// driverName is the SQLite driver with the registry's connection set-up.
const driverName = "hostfork-sqlite3"

// vfsName is the VFS the registry opens with.
const vfsName = "hostfork"

// registerErr is set when the registry's VFS or connection set-up could
// not be registered with SQLite; Open then fails.
var registerErr error

func init() {
	if C.hf_register() != 0 {
		registerErr = errors.New("registry: SQLite refused the registry's VFS or connection set-up")
	}
	// SQLite sets the automatic checkpoint's default after the
	// connection's set-up in C, so it is changed here.
	pragma := "PRAGMA wal_autocheckpoint = " + strconv.Itoa(autocheckpointPages)
	sql.Register(driverName, &sqlite3.SQLiteDriver{ConnectHook: func(c *sqlite3.SQLiteConn) error {
		_, err := c.Exec(pragma, nil)
		return err
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
