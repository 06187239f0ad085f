package hostfork

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.yaml.in/yaml/v3"

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
# Soft admission of agent workloads (run/exec --workload agent): the share
# of logical cores and of available memory they may use; each reserves at
# least 2 GiB. At least one slot always exists.
admission:
  share: 0.70
`

// Config is the parsed store configuration.
type Config struct {
	Retention spec.Retention `yaml:"retention"`
	Admission struct {
		// Share of logical cores and available memory that admitted agent
		// workloads may use (default 0.70).
		Share float64 `yaml:"share"`
	} `yaml:"admission"`
}

// ensureConfig writes the default configuration when the store has none.
func ensureConfig(root string) {
	f, err := os.OpenFile(filepath.Join(root, ConfigFile), os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
	if err != nil {
		return // exists (or unwritable: Config reports that)
	}
	_, _ = f.WriteString(defaultConfig)
	f.Close()
}

// Config reads the store configuration, filling defaults.
func (h *Host) Config() (*Config, error) {
	c := &Config{}
	b, err := os.ReadFile(filepath.Join(h.root, ConfigFile))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("reading %s: %w", ConfigFile, err)
	}
	if err == nil {
		dec := yaml.NewDecoder(bytes.NewReader(b))
		dec.KnownFields(true)
		if err := dec.Decode(c); err != nil && err.Error() != "EOF" {
			return nil, fmt.Errorf("%s: %v (fix the file or delete it to get the defaults back): %w", filepath.Join(h.root, ConfigFile), err, ErrStore)
		}
	}
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
