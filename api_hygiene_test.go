package hostfork_test

import (
	"bufio"
	"bytes"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/token"
	"go/types"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/habemus-papadum/hostfork/internal/testutil"
)

const modulePath = "github.com/habemus-papadum/hostfork"

// goTool is the go command that built this test.
func goTool(t testing.TB) string {
	t.Helper()
	if p := filepath.Join(runtime.GOROOT(), "bin", "go"); fileExists(p) {
		return p
	}
	p, err := exec.LookPath("go")
	if err != nil {
		testutil.Skip(t, "no go command: "+err.Error())
	}
	return p
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// exportImporter imports packages from the compiler's export data, which
// `go list -export` produces for the root package and everything it
// depends on (cgo included), so the check sees exactly what a user's
// compiler sees.
func exportImporter(t *testing.T, fset *token.FileSet) types.Importer {
	t.Helper()
	cmd := exec.Command(goTool(t), "list", "-export", "-deps", "-f", "{{.ImportPath}}\t{{.Export}}", ".")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list -export: %v: %s", err, stderr.Bytes())
	}
	exports := map[string]string{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if path, file, ok := strings.Cut(sc.Text(), "\t"); ok && file != "" {
			exports[path] = file
		}
	}
	return importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
		f, ok := exports[path]
		if !ok {
			return nil, fmt.Errorf("no export data for %s", path)
		}
		return os.Open(f)
	})
}

// internalMentions lists every exported identifier of pkg whose type
// mentions a package under an internal/ directory: functions and methods
// (their parameters and results), variables, constants, type definitions
// (their underlying types, exported fields and exported methods, also
// promoted ones), and the targets of aliases — followed transitively
// through every named type reachable that way, wherever it is defined.
func internalMentions(pkg *types.Package) []string {
	var found []string
	seen := map[types.Type]bool{}
	var check func(where string, T types.Type)
	internal := func(p *types.Package) bool {
		return p != nil && (strings.Contains(p.Path(), "/internal/") || strings.HasPrefix(p.Path(), "internal/"))
	}
	checkSig := func(where string, sig *types.Signature) {
		for i := 0; i < sig.Params().Len(); i++ {
			check(where+" param "+sig.Params().At(i).Name(), sig.Params().At(i).Type())
		}
		for i := 0; i < sig.Results().Len(); i++ {
			check(fmt.Sprintf("%s result %d", where, i), sig.Results().At(i).Type())
		}
	}
	check = func(where string, T types.Type) {
		switch T := T.(type) {
		case *types.Alias:
			if internal(T.Obj().Pkg()) {
				found = append(found, fmt.Sprintf("%s: %s", where, T))
			}
			check(where, types.Unalias(T))
		case *types.Named:
			if internal(T.Obj().Pkg()) {
				found = append(found, fmt.Sprintf("%s: %s", where, T))
				return
			}
			for i := 0; i < T.TypeArgs().Len(); i++ {
				check(where+" type argument", T.TypeArgs().At(i))
			}
			if seen[T] {
				return
			}
			seen[T] = true
			name := T.Obj().Name()
			check(name, T.Underlying())
			ms := types.NewMethodSet(types.NewPointer(T))
			for i := 0; i < ms.Len(); i++ {
				m := ms.At(i).Obj()
				if m.Exported() {
					checkSig(name+"."+m.Name(), m.Type().(*types.Signature))
				}
			}
		case *types.Pointer:
			check(where, T.Elem())
		case *types.Slice:
			check(where, T.Elem())
		case *types.Array:
			check(where, T.Elem())
		case *types.Chan:
			check(where, T.Elem())
		case *types.Map:
			check(where, T.Key())
			check(where, T.Elem())
		case *types.Signature:
			checkSig(where, T)
		case *types.Tuple:
			for i := 0; i < T.Len(); i++ {
				check(where, T.At(i).Type())
			}
		case *types.Struct:
			for i := 0; i < T.NumFields(); i++ {
				// Embedded fields count even when unexported: their
				// exported fields and methods are promoted.
				if f := T.Field(i); f.Exported() || f.Embedded() {
					check(where+"."+f.Name(), f.Type())
				}
			}
		case *types.Interface:
			for i := 0; i < T.NumMethods(); i++ {
				check(where+"."+T.Method(i).Name(), T.Method(i).Type())
			}
			for i := 0; i < T.NumEmbeddeds(); i++ {
				check(where, T.EmbeddedType(i))
			}
		case *types.TypeParam:
			check(where, T.Constraint())
		case *types.Union:
			for i := 0; i < T.Len(); i++ {
				check(where, T.Term(i).Type())
			}
		}
	}
	for _, name := range pkg.Scope().Names() {
		obj := pkg.Scope().Lookup(name)
		if !obj.Exported() {
			continue
		}
		// Functions, variables, constants, defined types and aliases
		// alike: what matters is the type the name stands for.
		check(name, obj.Type())
	}
	slices.Sort(found)
	return slices.Compact(found)
}

// No exported identifier of package hostfork mentions an internal
// package: a program in another module can name every type it is given
// (issue 9; STYLE.md, "Public API types are the contract").
func TestAPIMentionsNoInternalPackage(t *testing.T) {
	fset := token.NewFileSet()
	pkg, err := exportImporter(t, fset).Import(modulePath)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkg.Scope().Names()) < 50 {
		t.Fatalf("package %s has only %d names: not the real API?", pkg.Path(), len(pkg.Scope().Names()))
	}
	for _, m := range internalMentions(pkg) {
		t.Errorf("exported API mentions an internal package: %s", m)
	}
}

// The check finds what it must: a field, a result, an alias target and a
// method of a reachable type that name internal packages.
func TestAPIHygieneCheckFindsMentions(t *testing.T) {
	fset := token.NewFileSet()
	imp := exportImporter(t, fset)
	src := `package p

import (
	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/linux"
)

type Fine struct {
	Env    api.Env
	hidden linux.Identity
}

type Field struct{ ID *linux.Identity }

type Alias = linux.Identity

type viaMethod struct{}

func (viaMethod) Get() []linux.Identity { return nil }

func Result() (map[string]viaMethod, error) { return nil, nil }

func Param(func(linux.Liveness)) {}

var V Fine
`
	f, err := parser.ParseFile(fset, "p.go", src, 0)
	if err != nil {
		t.Fatal(err)
	}
	pkg, err := (&types.Config{Importer: imp}).Check("example.com/p", fset, []*ast.File{f}, nil)
	if err != nil {
		t.Fatal(err)
	}
	got := strings.Join(internalMentions(pkg), "\n")
	for _, want := range []string{"Field.ID", "Alias", "viaMethod.Get", "Param param "} {
		if !strings.Contains(got, want) {
			t.Errorf("the check missed %s; it found:\n%s", want, got)
		}
	}
	if strings.Contains(got, "hidden") || strings.Contains(got, "Fine") {
		t.Errorf("the check flagged an unexported field:\n%s", got)
	}
}
