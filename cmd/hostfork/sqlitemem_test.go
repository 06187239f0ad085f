package main

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/habemus-papadum/hostfork/internal/doctor"
	"github.com/habemus-papadum/hostfork/internal/registry"
)

// TestSQLiteMemoryReported: 'version' and 'doctor' say where the
// registry's SQLite allocates (decision 81), as the binary does: the
// arena where its SQLite has memsys5 (CI's race and static passes, built
// with scripts/build.sh --env), malloc otherwise (the first pass).
func TestSQLiteMemoryReported(t *testing.T) {
	c := newCLI(t)
	want := "system"
	if registry.Arena().Engaged {
		want = "arena"
	}
	out, err := c.command("version", "--json").Output()
	if err != nil {
		t.Fatalf("version --json: %v", err)
	}
	var v struct {
		SQLiteMemory string `json:"sqlite_memory"`
	}
	if err := json.Unmarshal(out, &v); err != nil || v.SQLiteMemory != want {
		t.Fatalf("version --json: sqlite_memory %q (%v), want %q\n%s", v.SQLiteMemory, err, want, out)
	}
	text, err := c.command("version").Output()
	if err != nil || !strings.Contains(string(text), "sqlite: "+want+" memory") {
		t.Errorf("version: %v\n%s", err, text)
	}

	out, _ = c.command("doctor", "--json").Output() // exit 121 where the default run can't run here
	var r doctor.Report
	if err := json.Unmarshal(out, &r); err != nil {
		t.Fatalf("doctor --json: %v\n%s", err, out)
	}
	if r.Facts == nil || r.Facts.SQLite.Memory != want || r.Facts.SQLite.Err != "" {
		t.Fatalf("doctor's SQLite facts %+v, want memory %q", r.Facts, want)
	}
	for _, ck := range r.Checks {
		if ck.ID != "exe.sqlite-memory" {
			continue
		}
		prefix := map[string]string{"arena": "memsys5 on an arena of 8.0 MiB", "system": "malloc:"}[want]
		if ck.Status != doctor.OK || !strings.HasPrefix(ck.Detail, prefix) {
			t.Errorf("exe.sqlite-memory: %s: %s; want ok, %q…", ck.Status, ck.Detail, prefix)
		}
		if want == "arena" && r.Facts.SQLite.Highwater == 0 {
			t.Errorf("doctor read no SQLite memory: %+v", r.Facts.SQLite)
		}
		return
	}
	t.Fatal("no exe.sqlite-memory check")
}
