package decide

import (
	"strings"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/api"
)

func ip(v int) *int { return &v }

func TestCommand(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	g := &api.Identity{BootID: "b1", PID: 10, StartTime: 5}
	running := api.Command{ID: "c", State: api.CommandRunning, Guardian: g, LeaderState: api.PhaseLive, TreeState: api.PhaseLive}
	leaderDone := &Receipt{WorkloadPID: 11, LeaderExited: &now, ExitCode: ip(3)}
	complete := &Receipt{WorkloadPID: 11, LeaderExited: &now, ExitCode: ip(0), TreeExited: &now, Complete: true, StopReason: api.ReasonIdle}
	yes := true
	cases := []struct {
		name  string
		c     api.Command
		ev    Evidence
		state api.CommandState
		tree  api.Phase
		check func(t *testing.T, n api.Command)
	}{
		{"final stays", api.Command{State: api.CommandExited, TreeState: api.PhaseExited}, Evidence{Guardian: Alive}, api.CommandExited, api.PhaseExited, nil},
		{"alive guardian, live tree", running, Evidence{BootID: "b1", Guardian: Alive}, api.CommandRunning, api.PhaseLive, nil},
		{"leader exit taken while guardian lives, leader proven gone", running, Evidence{BootID: "b1", Guardian: Alive, Receipt: leaderDone, WorkloadVerified: true, LeaderGone: true}, api.CommandRunning, api.PhaseLive,
			func(t *testing.T, n api.Command) {
				if n.LeaderState != api.PhaseExited || *n.ExitCode != 3 || n.Workload == nil {
					t.Fatalf("%+v", n)
				}
			}},
		{"a live guardian's receipt is only a claim", running, Evidence{BootID: "b1", Guardian: Alive, Receipt: leaderDone}, api.CommandRunning, api.PhaseLive,
			func(t *testing.T, n api.Command) {
				if n.LeaderState != api.PhaseLive || n.ExitCode != nil || n.Workload != nil {
					t.Fatalf("an unverified receipt was believed: %+v", n)
				}
			}},
		{"the guardian's last receipt overrides an earlier read", func() api.Command {
			c := running
			c.LeaderState, c.ExitCode = api.PhaseExited, ip(0)
			return c
		}(), Evidence{BootID: "b1", Guardian: Gone, Receipt: &Receipt{WorkloadPID: 11, LeaderExited: &now, Signal: ip(15), StoppedByHostfork: true, TreeExited: &now, Complete: true}}, api.CommandExited, api.PhaseExited,
			func(t *testing.T, n api.Command) {
				if n.ExitCode != nil || n.Signal == nil || *n.Signal != 15 || !n.StoppedByHostfork {
					t.Fatalf("%+v", n)
				}
			}},
		{"a complete receipt can't vouch for a live guardian", running, Evidence{BootID: "b1", Guardian: Alive, Receipt: complete}, api.CommandRunning, api.PhaseLive, nil},
		{"complete receipt, guardian gone", running, Evidence{BootID: "b1", Guardian: Gone, Receipt: complete, OOM: &yes, OOMEvidence: "x"}, api.CommandExited, api.PhaseExited,
			func(t *testing.T, n api.Command) {
				if n.StopReason != api.ReasonIdle || n.OOM == nil || !*n.OOM {
					t.Fatalf("%+v", n)
				}
			}},
		{"a leader OOM-killed under the budget", running, Evidence{BootID: "b1", Guardian: Gone, Receipt: &Receipt{WorkloadPID: 11, LeaderExited: &now, Signal: ip(9), TreeExited: &now, Complete: true}, OOM: &yes, OOMEvidence: "x"}, api.CommandExited, api.PhaseExited,
			func(t *testing.T, n api.Command) {
				if n.StopReason != api.ReasonLimit || !n.StoppedByHostfork {
					t.Fatalf("stop reason %q, stopped by hostfork %v", n.StopReason, n.StoppedByHostfork)
				}
			}},
		{"a leader the guardian saw OOM-killed, then its leftovers stopped", func() api.Command {
			c := running
			c.StopReason = api.ReasonOwnerExit
			return c
		}(), Evidence{BootID: "b1", Guardian: Gone, Receipt: &Receipt{WorkloadPID: 11, LeaderExited: &now, Signal: ip(9), LeaderOOM: &yes, TreeExited: &now, Complete: true}, OOM: &yes, OOMEvidence: "x"}, api.CommandExited, api.PhaseExited,
			func(t *testing.T, n api.Command) {
				if n.StopReason != api.ReasonLimit || !n.StoppedByHostfork {
					t.Fatalf("stop reason %q, stopped by hostfork %v", n.StopReason, n.StoppedByHostfork)
				}
			}},
		{"a leader killed from elsewhere after a child's OOM kill", running, Evidence{BootID: "b1", Guardian: Gone, Receipt: &Receipt{WorkloadPID: 11, LeaderExited: &now, Signal: ip(9), LeaderOOM: new(bool), TreeExited: &now, Complete: true}, OOM: &yes, OOMEvidence: "x"}, api.CommandExited, api.PhaseExited,
			func(t *testing.T, n api.Command) {
				if n.StopReason != "" || n.StoppedByHostfork || n.OOM == nil || !*n.OOM {
					t.Fatalf("stop reason %q, stopped by hostfork %v, oom %v", n.StopReason, n.StoppedByHostfork, n.OOM)
				}
			}},
		{"a leader dead of SIGKILL while the guardian could not sample: unknown, not the budget", running, Evidence{BootID: "b1", Guardian: Gone, Receipt: &Receipt{WorkloadPID: 11, LeaderExited: &now, Signal: ip(9), LeaderOOMStaleMS: 57, TreeExited: &now, Complete: true}, OOM: &yes, OOMEvidence: "the command's own oom_kill counter was 0 at start, 1 after its tree exited"}, api.CommandExited, api.PhaseExited,
			func(t *testing.T, n api.Command) {
				if n.StopReason != "" || n.StoppedByHostfork || n.OOM == nil || !*n.OOM || !strings.Contains(n.OOMEvidence, "is unknown: the guardian's last sample of the counter was 57 ms old") {
					t.Fatalf("stop reason %q, stopped by hostfork %v, oom %v (%s)", n.StopReason, n.StoppedByHostfork, n.OOM, n.OOMEvidence)
				}
			}},
		{"guardian gone, its files never named: never released", func() api.Command {
			c := running
			c.StdoutPath, c.StderrPath = "/s/out", "/s/err"
			return c
		}(), Evidence{BootID: "b1", Guardian: Gone, Unnamed: true, Workload: GroupEmpty}, api.CommandFailed, api.PhaseExited,
			func(t *testing.T, n api.Command) {
				if n.TreeEvidence != "never released (its files were never named)" || n.StdoutPath != "" || n.StderrPath != "" || n.LeaderState != api.PhaseUnknown {
					t.Fatalf("%+v", n)
				}
			}},
		{"guardian gone, its receipt empty: never released, its files kept", func() api.Command {
			c := running
			c.StdoutPath, c.StderrPath = "/s/out", "/s/err"
			return c
		}(), Evidence{BootID: "b1", Guardian: Gone, Unreleased: true, Workload: GroupEmpty}, api.CommandFailed, api.PhaseExited,
			func(t *testing.T, n api.Command) {
				if n.TreeEvidence != "never released (its receipt is empty)" || n.StdoutPath != "/s/out" || n.LeaderState != api.PhaseUnknown ||
					n.StoppedByHostfork || n.StopReason != "" || n.ExitCode != nil {
					t.Fatalf("%+v", n)
				}
			}},
		{"a stop at the gate: stopped by hostfork before it started", running, Evidence{BootID: "b1", Guardian: Gone, Unreleased: true, StopDecision: api.ReasonUser, Workload: GroupEmpty}, api.CommandFailed, api.PhaseExited,
			func(t *testing.T, n api.Command) {
				if n.StopReason != api.ReasonUser || !n.StoppedByHostfork || n.Error != "stopped before it started: nothing of it ran" || n.ExitCode != nil || n.Workload != nil {
					t.Fatalf("%+v", n)
				}
			}},
		{"a stop reason already recorded counts at the gate too", func() api.Command {
			c := running
			c.StopReason = api.ReasonDeadline
			return c
		}(), Evidence{BootID: "b1", Guardian: Gone, Unreleased: true, StopDecision: api.ReasonUser}, api.CommandFailed, api.PhaseExited,
			func(t *testing.T, n api.Command) {
				if n.StopReason != api.ReasonDeadline || !n.StoppedByHostfork {
					t.Fatalf("%+v", n)
				}
			}},
		{"an empty receipt is no proof while the guardian lives", running, Evidence{BootID: "b1", Guardian: Alive, Unreleased: true}, api.CommandRunning, api.PhaseLive, nil},
		{"a readable receipt outweighs an empty read", running, Evidence{BootID: "b1", Guardian: Gone, Unreleased: true, Receipt: complete}, api.CommandExited, api.PhaseExited, nil},
		{"files never named is no proof while the guardian lives", running, Evidence{BootID: "b1", Guardian: Alive, Unnamed: true}, api.CommandRunning, api.PhaseLive, nil},
		{"a readable receipt outweighs a missing name", running, Evidence{BootID: "b1", Guardian: Gone, Unnamed: true, Receipt: complete}, api.CommandExited, api.PhaseExited, nil},
		{"start error", running, Evidence{BootID: "b1", Guardian: Gone, Receipt: &Receipt{StartError: "no", LeaderExited: &now, ExitCode: ip(127), TreeExited: &now, Complete: true}}, api.CommandFailed, api.PhaseExited, nil},
		{"guardian gone, cgroup empty: no proof for members that left it", running, Evidence{BootID: "b1", Guardian: Gone, Workload: GroupEmpty}, api.CommandUnverified, api.PhaseUnverified, nil},
		{"a stuck guardian killed by a stop, its children all zombies", running, Evidence{BootID: "b1", Guardian: Gone, Workload: GroupEmpty, StuckGuardianKilled: true}, api.CommandExited, api.PhaseExited, nil},
		{"a stuck guardian killed, but its cgroup populated", running, Evidence{BootID: "b1", Guardian: Gone, Workload: GroupPopulated, StuckGuardianKilled: true}, api.CommandRunning, api.PhaseLive, nil},
		{"guardian gone, cgroup populated", running, Evidence{BootID: "b1", Guardian: Gone, Workload: GroupPopulated}, api.CommandRunning, api.PhaseLive, nil},
		{"guardian gone, no cgroup", running, Evidence{BootID: "b1", Guardian: Gone}, api.CommandUnverified, api.PhaseUnverified, nil},
		{"guardian gone, its leader too, no cgroup: the leader is not live", func() api.Command {
			c := running
			c.LeaderState = api.PhaseLive
			return c
		}(), Evidence{BootID: "b1", Guardian: Gone, LeaderGone: true}, api.CommandUnverified, api.PhaseUnverified,
			func(t *testing.T, n api.Command) {
				if n.LeaderState != api.PhaseExited || n.ExitCode != nil {
					t.Fatalf("leader %s, exit code %v; want exited, status unobserved", n.LeaderState, n.ExitCode)
				}
			}},
		{"another boot", running, Evidence{BootID: "b2", Guardian: Gone}, api.CommandExited, api.PhaseExited,
			func(t *testing.T, n api.Command) {
				if n.TreeEvidence != "boot id changed" {
					t.Fatal(n.TreeEvidence)
				}
			}},
		{"guardian unverified", running, Evidence{BootID: "b1", Guardian: Unverified}, api.CommandRunning, api.PhaseUnverified, nil},
		{"reserved, launcher alive", api.Command{State: api.CommandReserved}, Evidence{Launcher: Alive}, api.CommandReserved, "", nil},
		{"reserved, launcher gone", api.Command{State: api.CommandReserved}, Evidence{Launcher: Gone}, api.CommandFailed, api.PhaseExited, nil},
		{"reserved, launcher gone in this boot: never released", api.Command{State: api.CommandReserved, Launcher: &api.Identity{BootID: "b1", PID: 7, StartTime: 1}},
			Evidence{BootID: "b1", Launcher: Gone}, api.CommandFailed, api.PhaseExited,
			func(t *testing.T, n api.Command) {
				if n.Error != "launch interrupted before release" || n.TreeEvidence != "never released" {
					t.Fatalf("error %q, evidence %q", n.Error, n.TreeEvidence)
				}
			}},
		{"reserved, launcher of another boot: never released too", api.Command{State: api.CommandReserved, Launcher: &api.Identity{BootID: "b0", PID: 7, StartTime: 1}},
			Evidence{BootID: "b1", Launcher: Gone}, api.CommandFailed, api.PhaseExited,
			func(t *testing.T, n api.Command) {
				// The registration is durable before the release, so a
				// power loss can't take back one whose workload ran.
				if n.Error != "launch interrupted before release" || n.TreeEvidence != "never released" {
					t.Fatalf("error %q, evidence %q", n.Error, n.TreeEvidence)
				}
			}},
		{"unverified again alive", api.Command{State: api.CommandUnverified, Guardian: g, TreeState: api.PhaseUnverified}, Evidence{BootID: "b1", Guardian: Alive}, api.CommandRunning, api.PhaseLive, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			c.ev.Now = now
			n, _ := Command(c.c, c.ev)
			if n.State != c.state || n.TreeState != c.tree {
				t.Fatalf("state %s tree %s, want %s %s (%+v)", n.State, n.TreeState, c.state, c.tree, n)
			}
			if c.check != nil {
				c.check(t, n)
			}
			if _, changed := Command(n, c.ev); changed {
				t.Fatal("deciding again changed the record")
			}
		})
	}
}

func TestStopReasonFirstWins(t *testing.T) {
	if StopReason("", "", api.ReasonUser) != api.ReasonUser ||
		StopReason("", api.ReasonOwnerExit, api.ReasonUser) != api.ReasonOwnerExit ||
		StopReason(api.ReasonDeadline, api.ReasonOwnerExit, api.ReasonUser) != api.ReasonDeadline {
		t.Fatal("first reason does not win")
	}
}

func TestEnv(t *testing.T) {
	done := api.Command{State: api.CommandExited}
	live := api.Command{State: api.CommandRunning}
	base := api.Env{State: api.EnvActive, BootID: "b", OwnerExit: api.OwnerExitDetach}
	with := func(f func(e *api.Env)) api.Env { e := base; f(&e); return e }
	cases := []struct {
		name   string
		e      api.Env
		f      EnvFacts
		stop   bool
		reason api.StopReason
		quiet  bool
	}{
		{"nothing due", base, EnvFacts{BootID: "b", Commands: []api.Command{live}}, false, "", false},
		{"deadline", with(func(e *api.Env) { e.DeadlineMono = 10 }), EnvFacts{BootID: "b", NowMono: 10, Commands: []api.Command{done}}, true, api.ReasonDeadline, true},
		{"before deadline", with(func(e *api.Env) { e.DeadlineMono = 10 }), EnvFacts{BootID: "b", NowMono: 9}, false, "", true},
		{"reboot", base, EnvFacts{BootID: "other"}, true, api.ReasonReboot, true},
		{"owner gone, stop", with(func(e *api.Env) { e.OwnerExit = api.OwnerExitStop }), EnvFacts{BootID: "b", Owner: Gone, Commands: []api.Command{live}}, true, api.ReasonOwnerExit, false},
		{"owner gone, detach", base, EnvFacts{BootID: "b", Owner: Gone}, false, "", true},
		{"keeper lost", with(func(e *api.Env) { e.Keeper = &api.Identity{} }), EnvFacts{BootID: "b", Keeper: Gone}, true, api.ReasonKeeperLost, true},
		{"keeper lost in the deadline's grace", with(func(e *api.Env) {
			e.Keeper, e.DeadlineMono, e.Grace = &api.Identity{}, 10*time.Second, api.Duration(2*time.Second)
		}), EnvFacts{BootID: "b", Keeper: Gone, NowMono: 8 * time.Second}, true, api.ReasonDeadline, true},
		{"keeper lost before the deadline's grace", with(func(e *api.Env) {
			e.Keeper, e.DeadlineMono, e.Grace = &api.Identity{}, 10*time.Second, api.Duration(2*time.Second)
		}), EnvFacts{BootID: "b", Keeper: Gone, NowMono: 7 * time.Second}, true, api.ReasonKeeperLost, true},
		{"auto-stop, all done", with(func(e *api.Env) { e.AutoStop = true }), EnvFacts{BootID: "b", Commands: []api.Command{done}}, true, api.ReasonCompleted, true},
		{"auto-stop, one live", with(func(e *api.Env) { e.AutoStop = true }), EnvFacts{BootID: "b", Commands: []api.Command{done, live}}, false, "", false},
		{"decided, unrecorded", base, EnvFacts{BootID: "b", Decided: api.ReasonUser}, true, api.ReasonUser, true},
		{"decided, unrecorded, the deadline passed since", with(func(e *api.Env) { e.DeadlineMono = 10 }), EnvFacts{BootID: "b", NowMono: 10, Decided: api.ReasonUser}, true, api.ReasonUser, true},
		{"group removed, nothing kept: stopped, reason unknown", with(func(e *api.Env) { e.Tier, e.DeadlineMono = api.TierCgroup2, 10 }), EnvFacts{BootID: "b", NowMono: 10, GroupGone: true}, true, api.ReasonUnknown, true},
		{"a scope's group goes by itself: no proof of a stop", with(func(e *api.Env) { e.Tier = api.TierSystemdScope }), EnvFacts{BootID: "b", GroupGone: true}, false, "", true},
		{"stopping completes", with(func(e *api.Env) { e.State = api.EnvStopping; e.StopReason = api.ReasonIdle }), EnvFacts{BootID: "b"}, true, api.ReasonIdle, true},
	}
	for _, c := range cases {
		a := Env(c.e, c.f)
		if a.Stop != c.stop || a.Reason != c.reason || (c.stop && a.Quiet != c.quiet) {
			t.Errorf("%s: %+v", c.name, a)
		}
	}
	if a := Env(api.Env{State: api.EnvCreating, BootID: "b"}, EnvFacts{BootID: "b", Owner: Alive}); a.Pending == "" || a.AbandonCreation {
		t.Errorf("creating, owner alive: %+v", a)
	}
	if a := Env(api.Env{State: api.EnvCreating, BootID: "b"}, EnvFacts{BootID: "b", Owner: Gone}); !a.AbandonCreation || !strings.Contains(a.Due, "creator exited") {
		t.Errorf("creating, owner gone: %+v", a)
	}
	// In another boot too: the activation is durable before the
	// command is released, so a creation still creating never was active.
	never := []api.Command{{State: api.CommandFailed}}
	for _, cmds := range [][]api.Command{nil, never} {
		if a := Env(api.Env{State: api.EnvCreating, BootID: "b0"}, EnvFacts{BootID: "b", Owner: Gone, Commands: cmds}); !a.AbandonCreation || !strings.Contains(a.Due, "creator exited") {
			t.Errorf("creating, another boot, commands %+v: %+v", cmds, a)
		}
	}
}

func TestRetention(t *testing.T) {
	now := time.Now()
	ago := func(d time.Duration) *time.Time { t := now.Add(-d); return &t }
	cases := []struct {
		name string
		f    RetentionFacts
		want []string // "what:delete|hold"
	}{
		{"no stop time", RetentionFacts{}, []string{"environment:hold"}},
		{"unfinished", RetentionFacts{StoppedAt: ago(time.Hour), Unfinished: "command x is alive"}, []string{"evidence:hold"}},
		{"young", RetentionFacts{StoppedAt: ago(time.Minute), KeepTrees: time.Hour, KeepEvidence: time.Hour, Trees: []TreeFacts{{Name: "p"}}}, nil},
		{"trees due, evidence not", RetentionFacts{StoppedAt: ago(2 * time.Hour), KeepTrees: time.Hour, KeepEvidence: 3 * time.Hour, Trees: []TreeFacts{{Name: "p"}}}, []string{"tree p:delete"}},
		{"all due", RetentionFacts{StoppedAt: ago(4 * time.Hour), KeepTrees: time.Hour, KeepEvidence: 3 * time.Hour, Trees: []TreeFacts{{Name: "p"}}}, []string{"tree p:delete", "evidence:delete"}},
		{"held tree keeps evidence", RetentionFacts{StoppedAt: ago(4 * time.Hour), KeepTrees: time.Hour, KeepEvidence: time.Hour, Trees: []TreeFacts{{Name: "p", Hold: "export"}}}, []string{"tree p:hold", "evidence:hold"}},
		{"force", RetentionFacts{StoppedAt: ago(time.Second), KeepTrees: time.Hour, KeepEvidence: time.Hour, Force: true, Trees: []TreeFacts{{Name: "p"}}}, []string{"tree p:delete", "evidence:delete"}},
	}
	for _, c := range cases {
		c.f.Now = now
		var got []string
		for _, it := range Retention(c.f) {
			v := "hold"
			if it.Delete {
				v = "delete"
			}
			got = append(got, it.What+":"+v)
		}
		if len(got) != len(c.want) {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
			continue
		}
		for i := range got {
			if got[i] != c.want[i] {
				t.Errorf("%s: %v, want %v", c.name, got, c.want)
			}
		}
	}
}
