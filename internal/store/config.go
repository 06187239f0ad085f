package store

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/spec"
)

// ConfigFile is the store's configuration file, under the store root.
const ConfigFile = "config.yaml"

// Default retention, counted from an environment's confirmed stop.
const (
	DefaultRetainTrees    = 24 * time.Hour
	DefaultRetainEvidence = 7 * 24 * time.Hour
)

const defaultConfig = `# hostfork store configuration.
# Retention is counted from an environment's confirmed stop. Override it per
# environment (retention: in a spec, --retain-trees / --retain-evidence) or
# per call (hostfork gc --retain-trees / --retain-evidence). Nothing is
# deleted until 'hostfork gc' runs.
retention:
  trees: 24h      # private trees (snapshots, overlay uppers, copies)
  evidence: 168h  # records, logs, receipts, manifests, exports
# The longest an environment may live, from its activation to its deadline:
# 'hostfork extend' refuses to move a deadline beyond it. Unset: no limit.
# lifetime:
#   max: 72h
# Soft admission of agent workloads (run/exec --workload agent): the share
# of logical cores and of available memory they may use; each reserves at
# least 2 GiB. At least one slot always exists.
admission:
  share: 0.70
# Profiles: named view rules (with the trees they replace paths with) that
# any spec of this store may take by name (profile: NAME, --profile NAME),
# beside the built-in "agent". A spec's own profiles: win over these.
# $HOME is the home of the user who plans the environment.
# profiles:
#   build:
#     trees:
#       cache: {kind: overlay, source: $HOME/.cache}
#     view:
#       replace: {$HOME/.cache: cache}
#       scratch: [/tmp]
`

// Config is the parsed store configuration.
type Config = api.StoreConfig

// configFile is config.yaml: the store's settings and the operator's
// profiles (named view rules any spec of this store may take by name).
type configFile struct {
	Config   `yaml:",inline"`
	Profiles map[string]spec.Profile `yaml:"profiles,omitempty"`
}

func readConfigFile(root string) (*configFile, error) {
	c := &configFile{}
	b, err := os.ReadFile(filepath.Join(root, ConfigFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("reading %s: %w", ConfigFile, err)
	}
	if err == nil {
		if err := spec.DecodeStrict(b, c); err != nil {
			return nil, fmt.Errorf("%s: %v (fix the file or delete it to get the defaults back): %w", filepath.Join(root, ConfigFile), err, api.ErrStore)
		}
	}
	return c, nil
}

// Profiles are the profiles config.yaml defines under profiles:.
func Profiles(root string) (map[string]spec.Profile, error) {
	f, err := readConfigFile(root)
	if err != nil {
		return nil, err
	}
	return f.Profiles, nil
}

// ReadConfig reads the configuration of the store at root, filling
// defaults.
func ReadConfig(root string) (*Config, error) {
	f, err := readConfigFile(root)
	if err != nil {
		return nil, err
	}
	c := &f.Config
	if c.Retention.Trees == nil {
		d := spec.Duration(DefaultRetainTrees)
		c.Retention.Trees = &d
	}
	if c.Retention.Evidence == nil {
		d := spec.Duration(DefaultRetainEvidence)
		c.Retention.Evidence = &d
	}
	return c, nil
}
