package meta

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// layers is the import-direction rule of ARCHITECTURE.md ("Layers"): the
// layers in order (a package may import its own layer and those after
// it), which layer each package is in, and the forbidden layer pairs.
type layers struct {
	order  []string
	of     map[string]string // package (relative to the module, "." for the root) -> layer
	forbid map[[2]string]bool
}

// readLayers parses the ```layers block of ARCHITECTURE.md.
func readLayers(t *testing.T) layers {
	t.Helper()
	f, err := os.Open(filepath.Join(moduleRoot(t), "ARCHITECTURE.md"))
	if err != nil {
		t.Fatalf("ARCHITECTURE.md: %v", err)
	}
	defer f.Close()
	l := layers{of: map[string]string{}, forbid: map[[2]string]bool{}}
	in := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "```layers":
			in = true
			continue
		case in && line == "```":
			in = false
		}
		if !in || line == "" {
			continue
		}
		key, rest, ok := strings.Cut(line, ":")
		if !ok {
			t.Fatalf("ARCHITECTURE.md, layers: %q is not 'layer: packages' or 'forbid: a -> b'", line)
		}
		if key == "forbid" {
			a, b, ok := strings.Cut(rest, "->")
			if !ok {
				t.Fatalf("ARCHITECTURE.md, layers: %q: write 'forbid: from -> to'", line)
			}
			l.forbid[[2]string{strings.TrimSpace(a), strings.TrimSpace(b)}] = true
			continue
		}
		l.order = append(l.order, key)
		for _, p := range strings.Fields(rest) {
			if prev, dup := l.of[p]; dup {
				t.Fatalf("ARCHITECTURE.md, layers: %s is in both %s and %s", p, prev, key)
			}
			l.of[p] = key
		}
	}
	if len(l.order) < 3 {
		t.Fatal("ARCHITECTURE.md has no ```layers block (or it lost its layers)")
	}
	for pair := range l.forbid {
		if l.rank(pair[0]) < 0 || l.rank(pair[1]) < 0 {
			t.Fatalf("ARCHITECTURE.md, layers: forbid %s -> %s names an unknown layer", pair[0], pair[1])
		}
	}
	return l
}

func (l layers) rank(layer string) int {
	for i, n := range l.order {
		if n == layer {
			return i
		}
	}
	return -1
}

// TestImportDirection fails when a package is missing from
// ARCHITECTURE.md's layers, or imports a package of a layer above its own,
// a test-only package, or a layer its own is forbidden to reach
// (tailscale's deptest idea, with the rules written once, in
// ARCHITECTURE.md).
func TestImportDirection(t *testing.T) {
	module := strings.TrimSpace(string(goCmd(t, "list", "-m")))
	l := readLayers(t)
	rel := func(p string) (string, bool) {
		r, ok := strings.CutPrefix(p, module)
		if !ok {
			return "", false
		}
		if r == "" {
			return ".", true
		}
		return strings.TrimPrefix(r, "/"), true
	}
	pkgs := goList(t, "./...")
	if len(pkgs) < 20 {
		t.Fatalf("go list found only %d packages", len(pkgs))
	}
	seen := map[string]bool{}
	checked := 0
	for _, p := range pkgs {
		from, _ := rel(p.ImportPath)
		seen[from] = true
		fl, ok := l.of[from]
		if !ok {
			t.Errorf("package %s is not in ARCHITECTURE.md's layers: add it to the layer it belongs to", from)
			continue
		}
		for _, imp := range p.Imports {
			to, ok := rel(imp)
			if !ok {
				continue
			}
			tl, ok := l.of[to]
			if !ok {
				continue // reported as its own package
			}
			checked++
			if fl == "test-only" {
				continue // test helpers may use anything they test
			}
			switch {
			case tl == "test-only" && fl != "test-only":
				t.Errorf("%s (%s) imports the test-only package %s: only tests may", from, fl, to)
			case l.rank(tl) < l.rank(fl):
				t.Errorf("%s (%s) imports %s (%s), a layer above it: move the code, or change ARCHITECTURE.md's layers with a reason", from, fl, to, tl)
			case l.forbid[[2]string{fl, tl}]:
				t.Errorf("%s (%s) imports %s (%s): ARCHITECTURE.md forbids %s -> %s", from, fl, to, tl, fl, tl)
			}
		}
	}
	for p := range l.of {
		if !seen[p] {
			t.Errorf("ARCHITECTURE.md's layers name %s, which is not a package of the module: remove it", p)
		}
	}
	if checked < 50 {
		t.Fatalf("only %d imports inside the module were checked; the listing is broken", checked)
	}
}
