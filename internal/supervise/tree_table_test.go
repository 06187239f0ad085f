package supervise_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/tree"
)

// memberScript is one member of a test tree: member.sh NAME HONOUR PROCS.
// It moves itself to the group whose cgroup.procs is PROCS (when given),
// records a SIGTERM in term.NAME (and exits on it when HONOUR is 1), says
// it is ready in ready.NAME (its PID), and runs until it is killed.
const memberScript = `[ -n "$3" ] && echo $$ > "$3"
if [ "$2" = 1 ]; then trap 'echo > term.$1; exit 0' TERM; else trap 'echo > term.$1' TERM; fi
echo $$ > ready.$1.tmp && mv ready.$1.tmp ready.$1
while :; do sleep 0.1; done
`

// treeCase is one row of the table of tree stops that every
// implementation of the one rule set (internal/tree's package doc) must
// pass: Go's tree.Stop with the guardian as its subreaper root, and the
// guardian's own stop in C (hf_tree.c).
type treeCase struct {
	name      string
	subreaper bool // no workload cgroup
	// members: name → "honour" (exits on SIGTERM), "ignore" (records it
	// and runs on), "outside" (ignores, in a group beside the workload's),
	// "nested" (ignores, in a group below it), "daemon" (ignores,
	// double-forked into its own session: the guardian adopts it).
	members map[string]string
	// outsiders: members outside the cgroup the kill must find.
	outsiders bool
}

var treeCases = []treeCase{
	{name: "in the cgroup, TERM ends them", members: map[string]string{"a": "honour", "b": "honour"}},
	{name: "a member ignores TERM: killed after the grace", members: map[string]string{"a": "honour", "c": "ignore"}},
	{name: "a member left the cgroup: signalled and killed, nothing left frozen", members: map[string]string{"c": "ignore", "d": "outside"}, outsiders: true},
	{name: "a member in a nested group", members: map[string]string{"e": "nested"}},
	{name: "subreaper tier: an adopted daemon", subreaper: true, members: map[string]string{"a": "honour", "f": "daemon"}},
}

// treeRun is what one implementation's stop of a prepared tree reports.
type treeRun struct {
	outsiders int
	froze     bool
}

// stopWith is one implementation: it stops the tree of h with grace.
type stopWith func(t *testing.T, h *harness, grace time.Duration) treeRun

func TestTreeStopTable(t *testing.T) {
	impls := map[string]stopWith{
		"go": func(t *testing.T, h *harness, grace time.Duration) treeRun {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			res, err := tree.Stop(ctx, tree.Target{Cgroup: h.workload, Mount: h.mount, Roots: []linux.Identity{h.g.ID}, Subreapers: true}, grace)
			if err != nil || len(res.Survivors) > 0 {
				t.Fatalf("tree.Stop: %+v, %v", res, err)
			}
			h.next("leader", 10*time.Second)
			h.next("tree", 10*time.Second)
			return treeRun{outsiders: res.Outsiders, froze: res.Froze}
		},
		"c": func(t *testing.T, h *harness, grace time.Duration) treeRun {
			if err := h.g.RequestStop(api.ReasonUser); err != nil {
				t.Fatal(err)
			}
			h.next("leader", 10*time.Second)
			h.next("tree", 10*time.Second)
			r := h.readReceipt()
			if !r.Complete || r.StopReason != api.ReasonUser {
				t.Fatalf("receipt %+v", r)
			}
			return treeRun{outsiders: r.OutsideCgroup}
		},
	}
	for _, tc := range treeCases {
		for name, stop := range impls {
			t.Run(tc.name+"/"+name, func(t *testing.T) { runTreeCase(t, tc, stop) })
		}
	}
}

func runTreeCase(t *testing.T, tc treeCase, stop stopWith) {
	h := launch(t, launchOpts{subreaper: tc.subreaper})
	if err := os.WriteFile(filepath.Join(h.dir, "member.sh"), []byte(memberScript), 0o600); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(h.parent, "outside")
	if _, err := cgroup.Create(outside); err != nil {
		t.Fatal(err)
	}
	// A process that is not in the tree, beside it: never signalled.
	stranger := exec.Command("sh", "member.sh", "stranger", "0", filepath.Join(outside, "cgroup.procs"))
	stranger.Dir = h.dir
	if err := stranger.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = stranger.Process.Kill(); _ = stranger.Wait() })
	var parts []string
	grace := 10 * time.Second
	for name, kind := range tc.members {
		procs, honour := "", "0"
		switch kind {
		case "honour":
			honour = "1"
		case "outside":
			procs = filepath.Join(outside, "cgroup.procs")
		case "nested":
			nested := filepath.Join(h.workload, "nested")
			if _, err := cgroup.Create(nested); err != nil {
				t.Fatal(err)
			}
			procs = filepath.Join(nested, "cgroup.procs")
		}
		if kind != "honour" {
			grace = 300 * time.Millisecond
		}
		cmd := "sh member.sh " + name + " " + honour + " '" + procs + "' &"
		if kind == "daemon" {
			cmd = "(setsid sh member.sh " + name + " 0 '' </dev/null >/dev/null 2>&1 &);"
		}
		parts = append(parts, cmd)
	}
	cfg := h.config("sh", "-c", strings.Join(parts, " ")+" wait")
	cfg.Grace = grace
	h.release(cfg)
	h.next("started", 10*time.Second)
	fds := map[string]int{}
	for name := range tc.members {
		pid, _ := strconv.Atoi(h.waitFile("ready." + name))
		fds[name] = pidfdOf(t, pid)
	}
	h.waitFile("ready.stranger")

	run := stop(t, h, grace)

	// The stop is over (the guardian reported its tree gone): every member
	// got SIGTERM and is gone, and only then is the stranger's absence of
	// a SIGTERM worth anything.
	for name, fd := range fds {
		if _, err := os.Stat(filepath.Join(h.dir, "term."+name)); err != nil {
			t.Errorf("member %s got no SIGTERM", name)
		}
		if !exited(fd) {
			t.Errorf("member %s survived the stop", name)
		}
	}
	if _, err := os.Stat(filepath.Join(h.dir, "term.stranger")); err == nil {
		t.Error("the stranger beside the tree got a SIGTERM")
	}
	if err := stranger.Process.Signal(syscall.Signal(0)); err != nil {
		t.Errorf("the stranger beside the tree is gone: %v", err)
	}
	if tc.outsiders != (run.outsiders > 0) {
		t.Errorf("%d members found outside the cgroup, want some: %v", run.outsiders, tc.outsiders)
	}
	if run.froze {
		t.Error("a tree with a subreaper root was frozen")
	}
	if h.workload != "" {
		if ev, err := cgroup.Open(h.workload).Events(); err != nil || ev.Populated || ev.Frozen {
			t.Errorf("the workload group after the stop: %+v, %v", ev, err)
		}
	}
	h.finish()
}
