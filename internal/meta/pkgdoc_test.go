package meta

import (
	"go/ast"
	"go/build/constraint"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// moduleRoot finds the directory holding this module's go.mod, starting from
// the test's working directory (the package directory under go test).
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's working directory")
		}
		dir = parent
	}
}

// packageDirs lists the module's directories that hold Go source, skipping
// testdata, hidden and underscore directories (which the go tool ignores)
// and nested modules.
func packageDirs(t *testing.T, root string) []string {
	t.Helper()
	seen := map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root {
				if name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") {
					return filepath.SkipDir
				}
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir // another module
				}
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") {
			seen[filepath.Dir(path)] = true
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walking %s: %v", root, err)
	}
	dirs := make([]string, 0, len(seen))
	for d := range seen {
		dirs = append(dirs, d)
	}
	sort.Strings(dirs)
	return dirs
}

// ignored reports whether a file is kept out of every build by the "ignore"
// build tag (a generator script, say), so its package clause doesn't count.
func ignored(f *ast.File) bool {
	for _, cg := range f.Comments {
		if cg.Pos() > f.Package {
			break
		}
		for _, c := range cg.List {
			if !constraint.IsGoBuild(c.Text) {
				continue
			}
			if expr, err := constraint.Parse(c.Text); err == nil && mentions(expr, "ignore") {
				return true
			}
		}
	}
	return false
}

func mentions(e constraint.Expr, tag string) bool {
	switch e := e.(type) {
	case *constraint.TagExpr:
		return e.Tag == tag
	case *constraint.NotExpr:
		return mentions(e.X, tag)
	case *constraint.AndExpr:
		return mentions(e.X, tag) || mentions(e.Y, tag)
	case *constraint.OrExpr:
		return mentions(e.X, tag) || mentions(e.Y, tag)
	}
	return false
}

// TestPackageDocs checks that every package in the module has exactly one
// package doc comment, in the Go form "Package NAME ..." ("Command NAME ..."
// for a main package), so godoc shows what the package owns and who may
// import it (STYLE.md, habit 1). Test files are not counted.
func TestPackageDocs(t *testing.T) {
	root := moduleRoot(t)
	dirs := packageDirs(t, root)
	if len(dirs) < 2 {
		t.Fatalf("found only %d package directories under %s; the walk is broken", len(dirs), root)
	}
	for _, dir := range dirs {
		rel, _ := filepath.Rel(root, dir)
		ents, err := os.ReadDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		fset := token.NewFileSet()
		var withDoc []string
		pkgName := ""
		nfiles := 0
		for _, e := range ents {
			name := e.Name()
			if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.PackageClauseOnly|parser.ParseComments)
			if err != nil {
				t.Errorf("%s: %v", filepath.Join(rel, name), err)
				continue
			}
			if ignored(f) {
				continue
			}
			nfiles++
			pkgName = f.Name.Name
			if f.Doc == nil {
				continue
			}
			withDoc = append(withDoc, name)
			text := f.Doc.Text()
			want := "Package " + pkgName + " "
			if pkgName == "main" {
				want = "Command "
			}
			if !strings.HasPrefix(text, want) {
				t.Errorf("%s: package doc comment should begin %q, begins %q", filepath.Join(rel, name), want, firstLine(text))
			}
		}
		if nfiles == 0 {
			continue // test-only directory
		}
		switch len(withDoc) {
		case 1:
		case 0:
			t.Errorf("package %s (%s) has no package doc comment; add a doc.go saying what it owns and who may import it", pkgName, rel)
		default:
			t.Errorf("package %s (%s) has %d package doc comments (%s); keep exactly one", pkgName, rel, len(withDoc), strings.Join(withDoc, ", "))
		}
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}
