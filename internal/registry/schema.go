package registry

import (
	"context"
	"database/sql"
)

// migration brings the schema from version i to i+1: SQL, then an
// optional Go step in the same transaction. Never edit a released
// migration: append a new one.
type migration struct {
	sql string
	fn  func(ctx context.Context, tx *sql.Tx) error
}

var migrations = []migration{
	// 1: environments, commands, the intent ledger.
	{sql: `
CREATE TABLE envs (
	id         TEXT PRIMARY KEY,
	rev        INTEGER NOT NULL,
	state      TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	data       TEXT NOT NULL
);
CREATE INDEX envs_state ON envs(state);
CREATE TABLE commands (
	id         TEXT PRIMARY KEY,
	env_id     TEXT NOT NULL REFERENCES envs(id),
	rev        INTEGER NOT NULL,
	state      TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	data       TEXT NOT NULL
);
CREATE INDEX commands_env ON commands(env_id);
CREATE INDEX commands_state ON commands(state);
CREATE TABLE intents (
	id         INTEGER PRIMARY KEY AUTOINCREMENT,
	env_id     TEXT NOT NULL,
	command_id TEXT NOT NULL DEFAULT '',
	rev        INTEGER NOT NULL,
	kind       TEXT NOT NULL,
	target     TEXT NOT NULL,
	state      TEXT NOT NULL,
	identity   TEXT NOT NULL DEFAULT '',
	error      TEXT NOT NULL DEFAULT '',
	created_at INTEGER NOT NULL,
	settled_at INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX intents_state ON intents(state);
CREATE INDEX intents_env ON intents(env_id);
CREATE TABLE settings (
	key   TEXT PRIMARY KEY,
	value TEXT NOT NULL
);
`},
	// 2: registered baselines (host preparation).
	{sql: `
CREATE TABLE baselines (
	name       TEXT PRIMARY KEY,
	rev        INTEGER NOT NULL,
	state      TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	data       TEXT NOT NULL
);
`},
	// 3: commands in columns updated in place; labels and the event log
	// as tables; environments keep one JSON document plus the columns
	// queries filter and sort on. Rows of schema 2 are rewritten.
	{sql: `
CREATE TABLE envs3 (
	id             TEXT PRIMARY KEY,
	rev            INTEGER NOT NULL,
	state          TEXT NOT NULL,
	created_at     INTEGER NOT NULL,
	boot_id        TEXT NOT NULL DEFAULT '',
	deadline_at    INTEGER,
	activated_mono INTEGER NOT NULL DEFAULT 0,
	deadline_mono  INTEGER NOT NULL DEFAULT 0,
	data           TEXT NOT NULL
);
CREATE TABLE commands3 (` + commandColumnsDDL + `
);
CREATE TABLE labels (
	owner TEXT NOT NULL,  -- 'e' environment, 'c' command
	id    TEXT NOT NULL,
	key   TEXT NOT NULL,
	value TEXT NOT NULL,
	PRIMARY KEY (owner, id, key)
) WITHOUT ROWID;
CREATE INDEX labels_kv ON labels(owner, key, value);
CREATE TABLE events (
	seq         INTEGER PRIMARY KEY AUTOINCREMENT,
	recorded_at INTEGER NOT NULL,
	at          INTEGER NOT NULL,
	kind        TEXT NOT NULL,
	env_id      TEXT NOT NULL DEFAULT '',
	command_id  TEXT NOT NULL DEFAULT '',
	reason      TEXT NOT NULL DEFAULT '',
	exit_code   INTEGER,
	signal      INTEGER,
	detail      TEXT NOT NULL DEFAULT ''
);
CREATE INDEX events_env ON events(env_id);
`, fn: migrateV2Rows},
	// 4: a command's environment and state in one index, in place of the
	// index on the environment alone: a launch into an environment reads
	// its commands that are not final without visiting the final ones,
	// however many it has run (decision 59).
	{sql: `
CREATE INDEX commands_env_state ON commands(env_id, state);
DROP INDEX commands_env;
`},
	// 5: a command's session (tty or stdin pipe) and its last input and
	// output times (docs/sessions.md).
	{sql: `
ALTER TABLE commands ADD COLUMN session TEXT NOT NULL DEFAULT '';
ALTER TABLE commands ADD COLUMN last_input_at INTEGER;
ALTER TABLE commands ADD COLUMN last_output_at INTEGER;
`},
}

// SchemaVersion is the version this build writes.
var SchemaVersion = len(migrations)

// commandColumnsDDL is the commands table of schema 3 (see rows.go for
// the column order the code reads and writes).
const commandColumnsDDL = `
	id                  TEXT PRIMARY KEY,
	env_id              TEXT NOT NULL REFERENCES envs3(id),
	rev                 INTEGER NOT NULL,
	state               TEXT NOT NULL,
	created_at          INTEGER NOT NULL,
	purpose             TEXT NOT NULL DEFAULT '',
	argv                TEXT NOT NULL DEFAULT '[]',
	cwd                 TEXT NOT NULL DEFAULT '',
	output              TEXT NOT NULL DEFAULT '',
	dir                 TEXT NOT NULL DEFAULT '',
	stdout_path         TEXT NOT NULL DEFAULT '',
	stderr_path         TEXT NOT NULL DEFAULT '',
	env_policy          TEXT NOT NULL DEFAULT '',
	env_policy_note     TEXT NOT NULL DEFAULT '',
	env_keys            TEXT NOT NULL DEFAULT '',
	tier                TEXT NOT NULL DEFAULT '',
	boot_id             TEXT NOT NULL DEFAULT '',
	launcher_pid        INTEGER NOT NULL DEFAULT 0,
	launcher_start      INTEGER NOT NULL DEFAULT 0,
	cgroup_path         TEXT NOT NULL DEFAULT '',
	cgroup_inode        INTEGER NOT NULL DEFAULT 0,
	guardian_pid        INTEGER NOT NULL DEFAULT 0,
	guardian_start      INTEGER NOT NULL DEFAULT 0,
	proof_dev           INTEGER NOT NULL DEFAULT 0,
	proof_ino           INTEGER NOT NULL DEFAULT 0,
	workload_pid        INTEGER NOT NULL DEFAULT 0,
	workload_start      INTEGER NOT NULL DEFAULT 0,
	started_at          INTEGER,
	timeout_ns          INTEGER NOT NULL DEFAULT 0,
	timeout_mono        INTEGER NOT NULL DEFAULT 0,
	exit_code           INTEGER,
	signal              INTEGER,
	leader_state        TEXT NOT NULL DEFAULT '',
	leader_exited_at    INTEGER,
	tree_state          TEXT NOT NULL DEFAULT '',
	tree_exited_at      INTEGER,
	tree_evidence       TEXT NOT NULL DEFAULT '',
	stop_reason         TEXT NOT NULL DEFAULT '',
	stopped_by_hostfork INTEGER NOT NULL DEFAULT 0,
	oom                 INTEGER,
	oom_evidence        TEXT NOT NULL DEFAULT '',
	oom_baseline        INTEGER,
	survivors           TEXT NOT NULL DEFAULT '',
	output_truncated    INTEGER NOT NULL DEFAULT 0,
	limits_note         TEXT NOT NULL DEFAULT '',
	workload_kind       TEXT NOT NULL DEFAULT '',
	admission           TEXT NOT NULL DEFAULT '',
	capture             TEXT NOT NULL DEFAULT '',
	cleanup_errors      TEXT NOT NULL DEFAULT '',
	error               TEXT NOT NULL DEFAULT ''`

// indexesV3 are created once the schema-3 tables have their final names.
const indexesV3 = `
CREATE INDEX envs_state ON envs(state);
CREATE INDEX envs_created ON envs(created_at);
CREATE INDEX commands_env ON commands(env_id);
CREATE INDEX commands_state ON commands(state);
CREATE INDEX commands_created ON commands(created_at);
`
