package cli

import (
	"fmt"
	"regexp"
	"runtime"
	"runtime/debug"
	"sync"

	"github.com/spf13/cobra"
)

// BuildInfo is hostfork's build provenance, read from the binary itself.
type BuildInfo struct {
	Version   string `json:"version"`
	GoVersion string `json:"go_version"`
	Commit    string `json:"commit"`
	Dirty     *bool  `json:"dirty"`
	CommitAt  string `json:"commit_time,omitempty"`
	// Kind is "release" only when the version is a clean semantic version
	// tag of the exact commit built; everything else is "source".
	Kind string `json:"kind"`
}

// The version patterns are compiled on first use, not at every start of
// the binary.
var (
	releaseVersion = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`) })
	pseudoVersion  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\d{14}-[0-9a-f]{12}$`) })
)

// ReadBuildInfo reads the provenance embedded by the Go toolchain.
func ReadBuildInfo() BuildInfo {
	b := BuildInfo{Version: "unknown", GoVersion: runtime.Version(), Commit: "unknown", Kind: "source"}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		return b
	}
	b.Version = bi.Main.Version
	modified := ""
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			b.Commit = s.Value
		case "vcs.modified":
			modified = s.Value
		case "vcs.time":
			b.CommitAt = s.Value
		}
	}
	if modified != "" {
		d := modified == "true"
		b.Dirty = &d
	}
	// A version the toolchain took from a tag on the built commit is a
	// plain semver; untagged or dirty builds get pseudo-versions or
	// "+dirty", and local builds without VCS data "(devel)".
	if releaseVersion().MatchString(b.Version) && !pseudoVersion().MatchString(b.Version) && (b.Dirty == nil || !*b.Dirty) {
		b.Kind = "release"
	}
	return b
}

func newVersionCmd(g *globals) *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "version",
		Short: "Print version, Go version and build provenance",
		Args:  exactArgs(0, "no arguments"),
		RunE: func(c *cobra.Command, args []string) error {
			b := ReadBuildInfo()
			if asJSON {
				return printJSON(g.out, b)
			}
			dirty := "unknown"
			if b.Dirty != nil {
				dirty = fmt.Sprint(*b.Dirty)
			}
			fmt.Fprintf(g.out, "hostfork %s (%s build)\n  go:     %s\n  commit: %s\n  dirty:  %s\n", b.Version, b.Kind, b.GoVersion, b.Commit, dirty)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}
