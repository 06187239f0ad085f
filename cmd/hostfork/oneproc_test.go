package main

import (
	"bytes"
	"regexp"
	"strings"
	"testing"
)

// TestOneP: the hostfork binary runs with one P from its first package
// initialiser on, before the initialisers of hostfork's packages and of
// its heavier dependencies, and GOMAXPROCS in the environment still wins
// (decisions 54 and 65); an empty one counts as unset. The runtime
// reports both: GODEBUG=inittrace=1 prints each initialiser as it runs,
// schedtrace=1 the number of Ps every millisecond.
func TestOneP(t *testing.T) {
	c := newCLI(t)
	run := func(env []string, args ...string) string {
		t.Helper()
		cmd := c.command(args...)
		cmd.Env = append(withoutGoEnv(cmd.Env), env...)
		var stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = nil, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("hostfork %v (%v): %v\n%s", args, env, err, stderr.String())
		}
		return stderr.String()
	}

	const module = "github.com/habemus-papadum/hostfork/"
	const oneproc = module + "cmd/hostfork/internal/oneproc"
	var order []string
	for _, l := range strings.Split(run([]string{"GODEBUG=inittrace=1"}, "version"), "\n") {
		if f := strings.Fields(l); len(f) > 1 && f[0] == "init" {
			order = append(order, f[1])
		}
	}
	first := -1
	for i, p := range order {
		if p == oneproc {
			first = i
			break
		}
	}
	if first < 0 {
		t.Fatalf("no initialiser of %s in the trace:\n%s", oneproc, strings.Join(order, "\n"))
	}
	for _, p := range order[:first] {
		for _, later := range []string{module + "internal/", "go.yaml.in/", "github.com/spf13/", "github.com/mattn/", "github.com/godbus/"} {
			if strings.HasPrefix(p, later) {
				t.Errorf("%s initialised before %s: one P must come first", p, oneproc)
			}
		}
	}

	// The Ps at the last scheduler trace of a run that lasts some
	// milliseconds.
	procs := regexp.MustCompile(`gomaxprocs=(\d+)`)
	last := func(env ...string) string {
		m := procs.FindAllStringSubmatch(run(append(env, "GODEBUG=schedtrace=1"), "run", "--", "sleep", "0.05"), -1)
		if len(m) == 0 {
			t.Fatalf("no scheduler trace with %v", env)
		}
		return m[len(m)-1][1]
	}
	if got := last(); got != "1" {
		t.Errorf("hostfork runs with %s Ps, want 1", got)
	}
	if got := last("GOMAXPROCS="); got != "1" {
		t.Errorf("with GOMAXPROCS empty in the environment hostfork runs with %s Ps, want 1", got)
	}
	if got := last("GOMAXPROCS=2"); got != "2" {
		t.Errorf("with GOMAXPROCS=2 in the environment hostfork runs with %s Ps, want 2", got)
	}
}

// withoutGoEnv is the test's environment without GOMAXPROCS and GODEBUG.
func withoutGoEnv(env []string) []string {
	var kept []string
	for _, kv := range env {
		if !strings.HasPrefix(kv, "GOMAXPROCS=") && !strings.HasPrefix(kv, "GODEBUG=") {
			kept = append(kept, kv)
		}
	}
	return kept
}
