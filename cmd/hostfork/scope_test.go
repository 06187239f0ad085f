package main

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// The systemd-scope tier against a real systemd (booted in a throwaway
// nspawn container, hostfork run inside it): a delegated scope per
// environment, the deadline enforced by the manager with the grace inside
// it, stop after the manager re-executed itself, and reap finishing an
// environment the manager ended.
func TestSystemdScopeTier(t *testing.T) {
	testutil.RequireRoot(t)
	bin := hostforkForUser(t) // this test binary, runnable as "hostfork"
	n := testutil.BootSystemd(t, testutil.NspawnOptions{ReadOnlyBinds: []string{bin + ":/usr/local/bin/hostfork"}})
	t.Logf("systemd booted in %v", n.BootTime)
	hf := func(args ...string) string {
		return n.Run(t, append([]string{"/usr/local/bin/hostfork", "--root", "/var/lib/hostfork-test"}, args...)...)
	}
	statusOf := func(id string) map[string]any {
		var st map[string]any
		if err := json.Unmarshal([]byte(hf("status", "--json", id)), &st); err != nil {
			t.Fatal(err)
		}
		return st
	}

	plan := hf("plan", "--ttl", "1m")
	if !strings.Contains(plan, "ownership tier: systemd-scope") {
		t.Fatalf("under systemd the default tier should be systemd-scope:\n%s", plan)
	}

	env := strings.TrimSpace(hf("run", "--detach", "--ttl", "2m", "--grace", "1s", "--", "sh", "-c", "setsid sleep 300 & exec sleep 300"))
	st := statusOf(env)
	unit, _ := st["unit"].(string)
	if st["tier"] != "systemd-scope" || unit != "hostfork-"+env+".scope" {
		t.Fatalf("record: tier %v unit %v", st["tier"], st["unit"])
	}
	show := n.Run(t, "systemctl", "show", unit, "-p", "ActiveState", "-p", "Delegate", "-p", "RuntimeMaxUSec", "-p", "TimeoutStopUSec")
	for _, want := range []string{"ActiveState=active", "Delegate=yes", "RuntimeMaxUSec=1min 5", "TimeoutStopUSec=1s"} {
		if !strings.Contains(show, want) {
			t.Fatalf("scope properties lack %s (the deadline includes the grace):\n%s", want, show)
		}
	}
	// The manager restarts; hostfork still stops what it owns.
	n.Run(t, "systemctl", "daemon-reexec")
	hf("stop", env)
	st = statusOf(env)
	if st["state"] != "stopped" || st["stop_reason"] != "user" {
		t.Fatalf("after stop: %v %v", st["state"], st["stop_reason"])
	}
	if out, _ := n.Command(t.Context(), "systemctl", "is-active", unit).CombinedOutput(); strings.TrimSpace(string(out)) == "active" {
		t.Fatalf("scope %s still active after stop", unit)
	}

	// The manager enforces the deadline: SIGTERM (ignored) at ttl-grace,
	// SIGKILL at ttl, without hostfork's help.
	env = strings.TrimSpace(hf("run", "--detach", "--ttl", "4s", "--grace", "1s", "--", "sh", "-c", "trap '' TERM; sleep 300 & wait"))
	unit = "hostfork-" + env + ".scope"
	deadline := time.Now().Add(30 * time.Second)
	for {
		out, _ := n.Command(t.Context(), "systemctl", "is-active", unit).CombinedOutput()
		if s := strings.TrimSpace(string(out)); s != "active" && s != "deactivating" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("scope %s still active 30 s after a 4 s deadline", unit)
		}
		time.Sleep(200 * time.Millisecond)
	}
	hf("reap")
	st = statusOf(env)
	if st["state"] != "stopped" || st["stop_reason"] != "deadline" {
		t.Fatalf("after the manager's deadline and reap: state %v reason %v", st["state"], st["stop_reason"])
	}
	cmds, _ := st["commands"].([]any)
	if len(cmds) != 1 || cmds[0].(map[string]any)["tree_state"] != "exited" {
		t.Fatalf("command record after the deadline: %v", cmds)
	}
}
