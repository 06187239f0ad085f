package engine

import "github.com/habemus-papadum/hostfork/internal/store"

// ConfigFile is the store's configuration file, under the store root.
const ConfigFile = store.ConfigFile

// Config is the parsed store configuration.
type Config = store.Config

// DefaultRoot is the default store directory (store.DefaultRoot).
func DefaultRoot() (string, error) { return store.DefaultRoot() }

// Config reads the store configuration, filling defaults.
func (e *Engine) Config() (*Config, error) { return store.ReadConfig(e.root) }
