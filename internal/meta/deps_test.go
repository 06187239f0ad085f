package meta

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// forbidden reports whether a library package must not depend on path: the
// CLI framework belongs to internal/cli, and HTTP to a future adapter
// (STYLE.md, habit 9; DESIGN.md, "Interfaces").
func forbidden(path string) bool {
	return path == "github.com/spf13/cobra" || strings.HasPrefix(path, "github.com/spf13/cobra/") ||
		path == "net/http" || strings.HasPrefix(path, "net/http/")
}

type listedPackage struct {
	ImportPath string
	Imports    []string
}

// goCmd runs the go command in the module root and returns its output.
func goCmd(t *testing.T, args ...string) []byte {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		// go test puts $GOROOT/bin first on the test's PATH.
		t.Fatalf("the go command is not on PATH: %v", err)
	}
	cmd := exec.Command(goTool, args...)
	cmd.Dir = moduleRoot(t)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return out
}

// goList runs "go list -json" and decodes its stream of packages.
func goList(t *testing.T, args ...string) []listedPackage {
	t.Helper()
	out := goCmd(t, append([]string{"list", "-e", "-json=ImportPath,Imports"}, args...)...)
	var pkgs []listedPackage
	dec := json.NewDecoder(bytes.NewReader(out))
	for {
		var p listedPackage
		if err := dec.Decode(&p); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("decoding go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	return pkgs
}

// isLibrary reports whether a package of the module is library code: the
// root package, spec, and everything under internal/ except the adapters
// (the CLI, the HTTP server and the MCP server: DESIGN.md, "Layout").
func isLibrary(module, path string) bool {
	rel, ok := strings.CutPrefix(path, module)
	if !ok {
		return false
	}
	switch {
	case rel == "":
		return true
	case rel == "/spec" || strings.HasPrefix(rel, "/spec/"):
		return true
	case rel == "/internal/cli" || strings.HasPrefix(rel, "/internal/cli/"),
		rel == "/internal/server" || strings.HasPrefix(rel, "/internal/server/"),
		rel == "/internal/mcp" || strings.HasPrefix(rel, "/internal/mcp/"),
		rel == "/internal/e2b" || strings.HasPrefix(rel, "/internal/e2b/"),
		rel == "/internal/servecli":
		return false
	case strings.HasPrefix(rel, "/internal/"):
		return true
	}
	return false
}

// chain returns an import path from "from" to the first package satisfying
// bad, found breadth-first over the import graph, or nil.
func chain(graph map[string][]string, from string, bad func(string) bool) []string {
	prev := map[string]string{from: ""}
	queue := []string{from}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		if bad(p) && p != from {
			var path []string
			for q := p; q != ""; q = prev[q] {
				path = append([]string{q}, path...)
			}
			return path
		}
		for _, imp := range graph[p] {
			if _, seen := prev[imp]; !seen {
				prev[imp] = p
				queue = append(queue, imp)
			}
		}
	}
	return nil
}

// TestLibraryDependencies fails when a library package starts to depend,
// directly or through any other package, on cobra or net/http
// (tailscale's tstest/deptest idea).
func TestLibraryDependencies(t *testing.T) {
	module := strings.TrimSpace(string(goCmd(t, "list", "-m")))
	if module == "" || strings.ContainsAny(module, " \n") {
		t.Fatalf("go list -m: want the one main module, got %q", module)
	}

	var roots []string
	for _, p := range goList(t, "./...") {
		if isLibrary(module, p.ImportPath) {
			roots = append(roots, p.ImportPath)
		}
	}
	for _, want := range []string{module, module + "/spec", module + "/internal/registry"} {
		if !slices.Contains(roots, want) {
			t.Fatalf("library package %s not found among %v; the package selection is broken", want, roots)
		}
	}

	// One go list over the CLI too, so the test proves it can see cobra
	// where it is allowed.
	graph := map[string][]string{}
	for _, p := range goList(t, "-deps", "./...") {
		graph[p.ImportPath] = p.Imports
	}
	if chain(graph, module+"/internal/cli", forbidden) == nil {
		t.Fatalf("internal/cli does not seem to reach cobra; the dependency graph from go list is incomplete")
	}
	for _, r := range roots {
		if c := chain(graph, r, forbidden); c != nil {
			t.Errorf("library package %s depends on %s: %s\n(library code must not import cobra or net/http; move the dependency to internal/cli or a separate adapter package)",
				r, c[len(c)-1], strings.Join(c, " -> "))
		}
	}
}

// serverOnly reports whether path is a dependency that only the companion
// binary may link: the HTTP server, the MCP server and their libraries.
func serverOnly(module string) func(string) bool {
	return func(path string) bool {
		for _, p := range []string{module + "/internal/server", module + "/internal/mcp", module + "/internal/servecli", module + "/internal/e2b",
			"connectrpc.com/", "github.com/prometheus/", "github.com/modelcontextprotocol/", "google.golang.org/protobuf", "expvar", "encoding/gob"} {
			if path == p || strings.HasPrefix(path, strings.TrimSuffix(p, "/")+"/") || (strings.HasSuffix(p, "/") && strings.HasPrefix(path, p)) {
				return true
			}
		}
		return false
	}
}

// TestHostforkBinaryLinksNoServer fails when cmd/hostfork starts to link
// what only 'serve' and 'mcp' need: their libraries initialise at every
// start of a binary that links them, so every CLI call would pay for them
// (docs/decisions.md, entry 50). The companion, cmd/hostfork-serve, must
// link them.
func TestHostforkBinaryLinksNoServer(t *testing.T) {
	module := strings.TrimSpace(string(goCmd(t, "list", "-m")))
	graph := map[string][]string{}
	for _, p := range goList(t, "-deps", "./cmd/hostfork", "./cmd/hostfork-serve") {
		graph[p.ImportPath] = p.Imports
	}
	bad := serverOnly(module)
	if c := chain(graph, module+"/cmd/hostfork-serve", func(p string) bool { return p == "github.com/prometheus/client_golang/prometheus" }); c == nil {
		t.Fatalf("cmd/hostfork-serve does not reach the Prometheus client; the dependency graph from go list is incomplete")
	}
	if c := chain(graph, module+"/cmd/hostfork", bad); c != nil {
		t.Errorf("cmd/hostfork links %s: %s\n(only the companion cmd/hostfork-serve may: keep the dependency behind internal/servecli)",
			c[len(c)-1], strings.Join(c, " -> "))
	}
}
