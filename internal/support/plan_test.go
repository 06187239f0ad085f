package support

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// The default store's unit names, which cfg's plans use.
var (
	defaultUnits    = UnitsFor("", true)
	ReapService     = defaultUnits.ReapService
	ReapTimer       = defaultUnits.ReapTimer
	FinalizeService = defaultUnits.FinalizeService
	ServeSocket     = defaultUnits.ServeSocket
	ServeService    = defaultUnits.ServeService
)

func cfg(t *testing.T, dir string) Config {
	t.Helper()
	exe := filepath.Join(dir, "bin", "hostfork")
	if err := os.MkdirAll(filepath.Dir(exe), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(exe, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return Config{Mode: System, Exe: exe, Root: "/srv/hostfork", Version: "v1.2.3 0123456789ab", UnitDir: filepath.Join(dir, "units"), DefaultStore: true}
}

// Two stores' installs never take the same unit files; the default store
// keeps the plain names.
func TestUnitsPerStore(t *testing.T) {
	a, b := cfg(t, t.TempDir()), cfg(t, t.TempDir())
	a.DefaultStore, b.DefaultStore = false, false
	b.Root, b.UnitDir = "/srv/other", a.UnitDir
	pa, err := Build(a, Host{Systemd: true})
	if err != nil {
		t.Fatal(err)
	}
	pb, err := Build(b, Host{Systemd: true})
	if err != nil {
		t.Fatal(err)
	}
	paths := map[string]bool{}
	for _, f := range pa.Files {
		paths[f.Path] = true
	}
	for _, f := range pb.Files {
		if paths[f.Path] {
			t.Errorf("both stores write %s", f.Path)
		}
	}
	for _, cmd := range pb.Install[1:] {
		if u := cmd[len(cmd)-1]; !strings.HasPrefix(u, "hostfork-") || u == ReapTimer || u == ServeSocket || u == ServeService {
			t.Errorf("store %s enables %s", b.Root, u)
		}
	}
	if again := UnitsFor(a.Root+"/", false); again != pa.Units {
		t.Errorf("the same root, spelled with a slash, names other units: %+v vs %+v", again, pa.Units)
	}
	if !strings.Contains(pb.Files[1].Content, "Unit="+pb.Units.ReapService+"\n") {
		t.Errorf("the timer does not start its own store's reaper:\n%s", pb.Files[1].Content)
	}
}

func TestBuildPlan(t *testing.T) {
	c := cfg(t, t.TempDir())
	p, err := Build(c, Host{Systemd: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Files) != 5 {
		t.Fatalf("files %v", p.Files)
	}
	want := map[string][]string{
		ReapService:     {"Type=oneshot", "ExecStart=" + c.Exe + " --root /srv/hostfork reap\n", "TimeoutStartSec=10min", "X-Hostfork-Version=v1.2.3 0123456789ab", "X-Hostfork-Root=/srv/hostfork"},
		ReapTimer:       {"OnUnitActiveSec=1min", "WantedBy=timers.target", "Unit=hostfork-reap.service"},
		FinalizeService: {"Type=oneshot", "Environment=HOSTFORK_FINALIZE_ENV=%i", "ExecStart=" + c.Exe + " --root /srv/hostfork reap\n", "TimeoutStartSec=10min", "(runs a full reap)"},
		ServeSocket:     {"ListenStream=/srv/hostfork/api.sock\n", "SocketMode=0660\n", "DirectoryMode=0700\n", "RemoveOnStop=yes\n", "WantedBy=sockets.target\n", "X-Hostfork-Root=/srv/hostfork"},
		ServeService:    {"ExecStart=" + c.Exe + " --root /srv/hostfork serve\n", "KillMode=process\n", "Requires=hostfork-serve.socket\n", "After=hostfork-serve.socket\n", "X-Hostfork-Version=v1.2.3 0123456789ab"},
	}
	if strings.Contains(p.Files[3].Content, "[Install]") {
		t.Errorf("%s has an [Install] section: it is started by its socket only", p.Files[3].Unit)
	}
	for _, f := range p.Files {
		if f.Mode != 0o644 || f.Path != filepath.Join(c.UnitDir, f.Unit) {
			t.Errorf("%s: mode %v path %s", f.Unit, f.Mode, f.Path)
		}
		for _, w := range want[f.Unit] {
			if !strings.Contains(f.Content, w) {
				t.Errorf("%s lacks %q:\n%s", f.Unit, w, f.Content)
			}
		}
		if execProgram(f.Content) != "" && execProgram(f.Content) != c.Exe {
			t.Errorf("%s runs %q", f.Unit, execProgram(f.Content))
		}
	}
	if !reflect.DeepEqual(p.Install, [][]string{{"systemctl", "daemon-reload"}, {"systemctl", "enable", "--now", ReapTimer},
		{"systemctl", "enable", "--now", ServeSocket}, {"systemctl", "try-restart", ServeService}}) {
		t.Errorf("install commands %v", p.Install)
	}
	if !reflect.DeepEqual(p.Uninstall, [][]string{{"systemctl", "disable", "--now", ReapTimer}, {"systemctl", "disable", "--now", ServeSocket},
		{"systemctl", "stop", ServeService}, {"systemctl", "daemon-reload"}}) {
		t.Errorf("uninstall commands %v", p.Uninstall)
	}
	if len(p.Alternatives) != 0 || p.NoSystemd != "" {
		t.Errorf("alternatives on a systemd host: %v %q", p.Alternatives, p.NoSystemd)
	}
	for _, never := range []string{"formats", "sysctls", "lingering", "removes retained data"} {
		if !strings.Contains(strings.Join(p.Never, "\n"), never) {
			t.Errorf("never-list lacks %q: %v", never, p.Never)
		}
	}
	// Pure: the same inputs give the same plan.
	q, _ := Build(c, Host{Systemd: true})
	if !reflect.DeepEqual(p, q) {
		t.Errorf("Build is not deterministic")
	}
}

func TestPlanWithoutSystemd(t *testing.T) {
	c := cfg(t, t.TempDir())
	p, err := Build(c, Host{Reason: "PID 1 is not systemd"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Systemd || p.NoSystemd == "" || len(p.Alternatives) != 2 {
		t.Fatalf("plan %+v", p)
	}
	if !strings.Contains(p.Alternatives[0], "* * * * * "+c.Exe+" --root /srv/hostfork reap") {
		t.Errorf("cron alternative %q", p.Alternatives[0])
	}
	if !strings.Contains(p.Alternatives[1], c.Exe+" --root /srv/hostfork reap --watch --interval 1m") {
		t.Errorf("supervisor alternative %q", p.Alternatives[1])
	}
	_, err = Install(context.Background(), p, failRunner(t))
	if !errors.Is(err, ErrNoSystemd) {
		t.Fatalf("install without systemd: %v", err)
	}
	if _, err := os.Stat(c.UnitDir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("install without systemd created %s", c.UnitDir)
	}
}

func TestUserPlanLingering(t *testing.T) {
	c := cfg(t, t.TempDir())
	c.Mode, c.UserName = User, "alice"
	no, yes := false, true
	p, _ := Build(c, Host{Systemd: true, Linger: &no})
	if !strings.Contains(strings.Join(p.Notes, "\n"), "loginctl enable-linger alice") {
		t.Errorf("no lingering advice: %v", p.Notes)
	}
	if p.Install[1][1] != "--user" {
		t.Errorf("user commands %v", p.Install)
	}
	p, _ = Build(c, Host{Systemd: true, Linger: &yes})
	if strings.Contains(strings.Join(p.Notes, "\n"), "loginctl enable-linger") {
		t.Errorf("lingering advice although enabled: %v", p.Notes)
	}
}

func TestQuoting(t *testing.T) {
	line := execLine("/opt/my tools/hostfork", "--root", "/srv/100%/$HOME", "reap")
	if line != `"/opt/my tools/hostfork" --root /srv/100%%/$$HOME reap` {
		t.Errorf("execLine: %s", line)
	}
	if got := execProgram("ExecStart=" + line); got != "/opt/my tools/hostfork" {
		t.Errorf("execProgram: %q", got)
	}
	if got := shellLine("/opt/my tools/hostfork", "--root", "/srv/it's"); got != `'/opt/my tools/hostfork' --root '/srv/it'\''s'` {
		t.Errorf("shellLine: %s", got)
	}
	if _, err := Build(Config{Mode: System, Exe: "hostfork", Root: "/srv"}, Host{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("relative executable: %v", err)
	}
}

// fakeSystemctl records commands and answers is-enabled/is-active from
// what enable/disable did, per unit.
type fakeSystemctl struct {
	ran     [][]string
	enabled map[string]bool
}

func (f *fakeSystemctl) run(_ context.Context, argv []string) (string, error) {
	f.ran = append(f.ran, argv)
	if f.enabled == nil {
		f.enabled = map[string]bool{}
	}
	unit := argv[len(argv)-1]
	switch argv[len(argv)-2] {
	case "is-enabled":
		if f.enabled[unit] {
			return "enabled\n", nil
		}
		return "disabled\n", errors.New("exit status 1")
	case "is-active":
		if f.enabled[unit] {
			return "active\n", nil
		}
		return "inactive\n", errors.New("exit status 3")
	}
	switch {
	case slices.Contains(argv, "enable"):
		f.enabled[unit] = true
	case slices.Contains(argv, "disable"):
		f.enabled[unit] = false
	}
	return "", nil
}

func (f *fakeSystemctl) changes() [][]string {
	var out [][]string
	for _, a := range f.ran {
		if v := a[len(a)-2]; v != "is-enabled" && v != "is-active" {
			out = append(out, a)
		}
	}
	return out
}

func failRunner(t *testing.T) Runner {
	return func(_ context.Context, argv []string) (string, error) {
		t.Errorf("ran %v", argv)
		return "", errors.New("no")
	}
}

func TestInstallIdempotentStatusUninstall(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	c := cfg(t, dir)
	p, _ := Build(c, Host{Systemd: true})
	fake := &fakeSystemctl{}

	res, err := Install(ctx, p, fake.run)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Changed || len(res.Written) != 5 || !reflect.DeepEqual(fake.changes(), p.Install) {
		t.Fatalf("first install: %+v, ran %v", res, fake.changes())
	}
	for _, f := range p.Files {
		st, err := os.Stat(f.Path)
		if err != nil || st.Mode().Perm() != 0o644 {
			t.Fatalf("%s: %v %v", f.Path, st, err)
		}
		b, _ := os.ReadFile(f.Path)
		if string(b) != f.Content {
			t.Errorf("%s differs from the plan", f.Path)
		}
	}
	ents, _ := os.ReadDir(c.UnitDir)
	if len(ents) != 5 {
		t.Errorf("unit dir holds %d entries (temporary files left?)", len(ents))
	}

	fake.ran = nil
	res, err = Install(ctx, p, fake.run)
	if err != nil {
		t.Fatal(err)
	}
	if res.Changed || len(res.Written) != 0 || len(fake.changes()) != 0 {
		t.Fatalf("re-install changed something: %+v, ran %v", res, fake.changes())
	}

	s, err := Inspect(ctx, p, fake.run)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Installed || len(s.Findings) != 0 {
		t.Fatalf("status: %+v", s)
	}

	// A newer hostfork elsewhere: the installed units are stale and run
	// another executable.
	c2 := c
	c2.Exe = filepath.Join(dir, "bin", "hostfork2")
	os.WriteFile(c2.Exe, []byte("x"), 0o755)
	c2.Version = "v1.3.0"
	p2, _ := Build(c2, Host{Systemd: true})
	s, _ = Inspect(ctx, p2, fake.run)
	joined := strings.Join(s.Findings, "\n")
	if !strings.Contains(joined, "a stale installation") || !strings.Contains(joined, "not this executable") {
		t.Errorf("stale findings: %v", s.Findings)
	}
	// The installed binary moved away.
	os.Remove(c.Exe)
	s, _ = Inspect(ctx, p2, fake.run)
	if !strings.Contains(strings.Join(s.Findings, "\n"), "no longer exists (a moved binary)") {
		t.Errorf("moved-binary finding: %v", s.Findings)
	}
	// Re-installing from the new executable rewrites the units.
	fake.ran = nil
	res, err = Install(ctx, p2, fake.run)
	if err != nil || len(res.Written) != 5 || !reflect.DeepEqual(fake.changes(), [][]string{p.Install[0], p.Install[3]}) {
		t.Fatalf("upgrade install: %+v %v, ran %v", res, err, fake.changes())
	}

	// Another store root's plan must not take the units over or remove them.
	c3 := c2
	c3.Root = "/srv/other"
	p3, _ := Build(c3, Host{Systemd: true})
	if _, err := Install(ctx, p3, fake.run); !errors.Is(err, ErrConflict) {
		t.Fatalf("install for another root: %v", err)
	}
	u, err := Uninstall(ctx, p3, fake.run)
	if err != nil || len(u.Removed) != 0 || len(u.Kept) != 5 {
		t.Fatalf("uninstall for another root: %+v %v", u, err)
	}

	// A file that is not hostfork's is never overwritten or removed.
	foreign := filepath.Join(c.UnitDir, FinalizeService)
	os.WriteFile(foreign, []byte("[Service]\nExecStart=/bin/true\n"), 0o644)
	if _, err := Install(ctx, p2, fake.run); !errors.Is(err, ErrConflict) {
		t.Fatalf("install over a foreign file: %v", err)
	}
	fake.ran = nil
	u, err = Uninstall(ctx, p2, fake.run)
	if err != nil {
		t.Fatal(err)
	}
	if len(u.Removed) != 4 || len(u.Kept) != 1 || !reflect.DeepEqual(fake.changes(), p2.Uninstall) {
		t.Fatalf("uninstall: %+v, ran %v", u, fake.changes())
	}
	if _, err := os.Stat(foreign); err != nil {
		t.Errorf("the foreign file was removed: %v", err)
	}
	if fake.enabled[ReapTimer] || fake.enabled[ServeSocket] {
		t.Errorf("timer or socket still enabled after uninstall: %v", fake.enabled)
	}
}

func TestInstallRefusesBuildCacheExecutable(t *testing.T) {
	dir := t.TempDir()
	c := cfg(t, dir)
	c.Exe = filepath.Join(dir, "go-build1234", "b001", "hostfork.test")
	os.MkdirAll(filepath.Dir(c.Exe), 0o755)
	os.WriteFile(c.Exe, nil, 0o755)
	p, _ := Build(c, Host{Systemd: true})
	if _, err := Install(context.Background(), p, failRunner(t)); !errors.Is(err, ErrUnstableExecutable) {
		t.Fatalf("want ErrUnstableExecutable, got %v", err)
	}
}
