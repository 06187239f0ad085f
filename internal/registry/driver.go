package registry

/*
#include <stdint.h>
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

func init() {
	sql.Register(driverName, &sqlite3.SQLiteDriver{ConnectHook: func(c *sqlite3.SQLiteConn) error {
		noCheckpointOnClose(c)
		return nil
	}})
}

// noCheckpointOnClose turns off SQLite's checkpoint when the last
// connection of a process closes (SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE): a
// short-lived hostfork process would otherwise fold the WAL into the
// database, fsync it and delete the WAL on every exit, and the next one
// would create it again. Checkpoints are left to SQLite's automatic
// checkpoint and to reap and gc (DB.Checkpoint). The driver does not expose
// its sqlite3 handle, so it is read from the connection's unexported field;
// if that ever fails, the default behaviour (checkpoint on close) remains.
func noCheckpointOnClose(c *sqlite3.SQLiteConn) bool {
	f := reflect.ValueOf(c).Elem().FieldByName("db")
	if !f.IsValid() || f.Kind() != reflect.Pointer {
		return false
	}
	p := unsafe.Pointer(f.Pointer())
	if p == nil {
		return false
	}
	return C.hf_no_ckpt_on_close(p) == 1
}
