package cli

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
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
	// Link is "static" for the installed build (scripts/build.sh: no
	// dynamic loader, decision 77), "dynamic" for a plain `go build` or
	// `go run`, "unknown" when the executable can't be read.
	Link string `json:"link"`
}

// The version patterns are compiled on first use, not at every start of
// the binary.
var (
	releaseVersion = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^v\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$`) })
	pseudoVersion  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\d{14}-[0-9a-f]{12}$`) })
)

// ReadBuildInfo reads the provenance embedded by the Go toolchain.
func ReadBuildInfo() BuildInfo {
	b := BuildInfo{Version: "unknown", GoVersion: runtime.Version(), Commit: "unknown", Kind: "source", Link: linkMode("/proc/self/exe")}
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

// linkMode reads the ELF program headers of the executable at path: one
// that names an interpreter (PT_INTERP, the dynamic loader) is "dynamic",
// one without is "static", and anything unreadable or not ELF "unknown".
// (Parsed by hand: debug/elf would add its packages' initialisers to
// every start of the CLI.)
func linkMode(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return "unknown"
	}
	defer f.Close()
	var h [64]byte
	if _, err := io.ReadFull(f, h[:]); err != nil || string(h[:4]) != "\x7fELF" {
		return "unknown"
	}
	var bo binary.ByteOrder
	switch h[5] {
	case 1:
		bo = binary.LittleEndian
	case 2:
		bo = binary.BigEndian
	default:
		return "unknown"
	}
	var off int64
	var size, num int
	switch h[4] {
	case 1: // ELFCLASS32
		off, size, num = int64(bo.Uint32(h[0x1c:])), int(bo.Uint16(h[0x2a:])), int(bo.Uint16(h[0x2c:]))
	case 2: // ELFCLASS64
		off, size, num = int64(bo.Uint64(h[0x20:])), int(bo.Uint16(h[0x36:])), int(bo.Uint16(h[0x38:]))
	default:
		return "unknown"
	}
	// An entry is 32 bytes in ELF32, 56 in ELF64; anything else is not
	// a file the kernel would run.
	if (h[4] == 1 && size != 32) || (h[4] == 2 && size != 56) || num == 0 || num > 4096 {
		return "unknown"
	}
	ph := make([]byte, size*num)
	if _, err := f.ReadAt(ph, off); err != nil {
		return "unknown"
	}
	const ptInterp = 3
	for i := 0; i < num; i++ {
		if bo.Uint32(ph[i*size:]) == ptInterp {
			return "dynamic"
		}
	}
	return "static"
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
			fmt.Fprintf(g.out, "hostfork %s (%s build)\n  go:     %s\n  commit: %s\n  dirty:  %s\n  link:   %s\n", b.Version, b.Kind, b.GoVersion, b.Commit, dirty, b.Link)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return c
}
