package server

import (
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// npmTools is the bin directory of the pinned npm tools
// (testutil.NPMTools).
func npmTools(t *testing.T) string {
	dir := testutil.NPMTools(t, ".bin/redocly", ".bin/openapi-typescript", ".bin/tsc")
	return filepath.Join(dir, "node_modules", ".bin")
}

// servedDocument writes the document GET /v1/openapi.json serves to a
// file in dir.
func servedDocument(t *testing.T, dir string) string {
	s := newTestServer(t)
	rec := httptest.NewRecorder()
	s.mux.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/openapi.json", nil))
	if rec.Code != 200 {
		t.Fatalf("GET /v1/openapi.json: %d %s", rec.Code, rec.Body)
	}
	p := filepath.Join(dir, "openapi.json")
	if err := os.WriteFile(p, rec.Body.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func runTool(t *testing.T, dir, bin string, args ...string) string {
	t.Helper()
	cmd := exec.Command(bin, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true", "NO_COLOR=1")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", filepath.Base(bin), strings.Join(args, " "), err, out)
	}
	return string(out)
}

// TestOpenAPIOutsideTools: clients nobody here wrote read the served
// document. Redocly's linter (its recommended rules) finds no error, and
// openapi-typescript's types of it compile under tsc --strict, with
// required fields, enums and nullable references as a TypeScript program
// relies on them.
func TestOpenAPIOutsideTools(t *testing.T) {
	bin := npmTools(t)
	dir := t.TempDir()
	doc := servedDocument(t, dir)

	out := runTool(t, dir, filepath.Join(bin, "redocly"), "lint", "--extends=recommended", doc)
	t.Logf("redocly lint: %s", lastLine(out))

	runTool(t, dir, filepath.Join(bin, "openapi-typescript"), doc, "-o", filepath.Join(dir, "api.d.ts"))
	if err := os.WriteFile(filepath.Join(dir, "use.ts"), []byte(useTS), 0o644); err != nil {
		t.Fatal(err)
	}
	runTool(t, dir, filepath.Join(bin, "tsc"), "--strict", "--noEmit", "--target", "es2022", "--module", "nodenext", "api.d.ts", "use.ts")
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// useTS is a TypeScript program over the generated types: it compiles
// only if required fields are required, enums are closed, and a nullable
// reference admits null (and its value's fields).
const useTS = `import type { components, paths } from "./api.js";

type Env = components["schemas"]["api.Env"];
type Command = components["schemas"]["api.Command"];

export function describe(e: Env): string {
	// Required fields: no "possibly undefined" under --strict.
	const ids: string[] = e.commands === null ? [] : e.commands.map((c: Command) => c.id + " " + c.record_state);
	return e.id + " " + e.state + " " + e.purpose + " " + ids.join(",");
}

export const active: Env["state"] = "active";
// @ts-expect-error an environment state is one of api/states.go's
export const bogus: Env["state"] = "bogus";

export function reason(c: Command): string {
	const r: Command["stop_reason"] = c.stop_reason;
	return r === "" ? "none" : r;
}

export function owner(e: Env): number {
	// A nullable reference: null, or the referenced object.
	return e.owner === null ? 0 : e.owner.pid;
}

export type ListEnvs = paths["/v1/envs"]["get"]["responses"][200]["content"]["application/json"];
export const none: ListEnvs = [];
`
