package server

import (
	"go/ast"
	"go/parser"
	"go/token"
	"path/filepath"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// TestEnumsComplete: the enums of the OpenAPI document and the metrics
// list exactly the constants package api's source declares of each type.
func TestEnumsComplete(t *testing.T) {
	fset := token.NewFileSet()
	files, err := filepath.Glob("../../api/*.go")
	if err != nil || len(files) == 0 {
		t.Fatalf("api's source: %v %v", files, err)
	}
	declared := map[string][]string{}
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		file, err := parser.ParseFile(fset, f, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		for _, d := range file.Decls {
			gd, ok := d.(*ast.GenDecl)
			if !ok || gd.Tok != token.CONST {
				continue
			}
			for _, spec := range gd.Specs {
				vs := spec.(*ast.ValueSpec)
				id, ok := vs.Type.(*ast.Ident)
				if !ok {
					continue
				}
				for _, v := range vs.Values {
					if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
						s, _ := strconv.Unquote(lit.Value)
						declared[id.Name] = append(declared[id.Name], s)
					}
				}
			}
		}
	}
	seen := map[string]bool{}
	for typ, vals := range enums {
		seen[typ.Name()] = true
		want := append([]string(nil), declared[typ.Name()]...)
		got := append([]string(nil), vals...)
		sort.Strings(want)
		sort.Strings(got)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("enum %s: %v, api declares %v", typ, got, want)
		}
	}
	for name, vals := range declared {
		if !seen[name] {
			t.Errorf("api declares constants of %s (%v) that no enum lists (add it to enums)", name, vals)
		}
	}
}
