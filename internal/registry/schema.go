package registry

// migrations are applied in order; migrations[i] brings the schema from
// version i to i+1. Never edit a released migration: append a new one.
var migrations = []string{
	// 1: environments, commands, the intent ledger.
	`
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
`,
	// 2: registered baselines (host preparation).
	`
CREATE TABLE baselines (
	name       TEXT PRIMARY KEY,
	rev        INTEGER NOT NULL,
	state      TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	data       TEXT NOT NULL
);
`,
}

// SchemaVersion is the version this build writes.
var SchemaVersion = len(migrations)
