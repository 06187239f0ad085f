package support_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/internal/cli"
	"github.com/habemus-papadum/hostfork/internal/servecli"
	"github.com/habemus-papadum/hostfork/internal/support"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// TestMain makes this test binary usable as hostfork itself when it is
// started under the name "hostfork" (bound into a container as
// /usr/local/bin/hostfork, or linked so on the host): the units it installs
// then run it as hostfork too.
func TestMain(m *testing.M) {
	switch filepath.Base(os.Args[0]) {
	case "hostfork":
		os.Exit(cli.Main(os.Args[1:]))
	case cli.CompanionName:
		os.Exit(servecli.Main(os.Args[1:]))
	}
	os.Exit(m.Run())
}

// hostforkLink makes a "hostfork" symlink to this test binary.
func hostforkLink(t *testing.T) string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "hostfork")
	if err := os.Symlink(self, link); err != nil {
		t.Fatal(err)
	}
	return link
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// TestWithoutSystemd: on a host whose PID 1 is not systemd (this machine,
// and CI), plan says so and names the alternatives, and install refuses
// with 121 without writing anything.
func TestWithoutSystemd(t *testing.T) {
	if st, err := os.Stat("/run/systemd/system"); err == nil && st.IsDir() {
		t.Skip("this host runs systemd; the nspawn test covers it")
	}
	hf := hostforkLink(t)
	root := filepath.Join(t.TempDir(), "store")
	u := support.UnitsFor(root, false)
	units := "/etc/systemd/system/" + u.ReapService
	_, before := os.Stat(units)
	for _, mode := range []string{"--system", "--user"} {
		out, err := exec.Command(hf, "--root", root, "support", "plan", mode).CombinedOutput()
		if err != nil {
			t.Fatalf("plan %s: %v\n%s", mode, err, out)
		}
		for _, want := range []string{
			"no systemd manager for " + mode, "PID 1 is not systemd", "will refuse (exit 121)",
			"* * * * * ", " --root " + root + " reap'",
			"reap --watch --interval 1m",
			"--- ", u.ReapTimer, "never:",
		} {
			if !bytes.Contains(out, []byte(want)) {
				t.Errorf("plan %s lacks %q:\n%s", mode, want, out)
			}
		}
		cmd := exec.Command(hf, "--root", root, "support", "install", mode)
		out, err = cmd.CombinedOutput()
		if code := exitCode(err); code != 121 {
			t.Fatalf("install %s: exit %d, want 121\n%s", mode, code, out)
		}
		if !bytes.Contains(out, []byte("nothing was written")) || !bytes.Contains(out, []byte("reap --watch")) {
			t.Errorf("install %s output:\n%s", mode, out)
		}
	}
	if _, after := os.Stat(units); (before == nil) != (after == nil) {
		t.Errorf("install without systemd changed %s", units)
	}
	if _, err := os.Stat(root); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("plan/install created the store root: %v", err)
	}
}

// TestReapWatch: reap --watch reaps repeatedly and ends cleanly on SIGTERM.
func TestReapWatch(t *testing.T) {
	hf := hostforkLink(t)
	root := filepath.Join(t.TempDir(), "store")
	// The output goes to a file, read while it runs (a pass is a line).
	outPath := filepath.Join(t.TempDir(), "out")
	outFile, err := os.Create(outPath)
	if err != nil {
		t.Fatal(err)
	}
	defer outFile.Close()
	output := func() string { b, _ := os.ReadFile(outPath); return string(b) }
	cmd := exec.Command(hf, "--root", root, "reap", "--watch", "--interval", "1s")
	cmd.Stdout, cmd.Stderr = outFile, outFile
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	t.Cleanup(func() { _ = cmd.Process.Kill(); <-done })
	// Two passes seen (the second a second after the first), however
	// long the start took under load; 30 s is a safety bound.
	for end := time.Now().Add(30 * time.Second); strings.Count(output(), "checked 0 environment(s)") < 2; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("reap --watch --interval 1s: fewer than 2 passes in 30 s:\n%s", output())
		}
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		done <- err // for the cleanup
		if err != nil {
			t.Fatalf("reap --watch after SIGINT: %v\n%s", err, output())
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("reap --watch did not stop on SIGINT\n%s", output())
	}
	if code := exitCode(exec.Command(hf, "--root", root, "reap", "--interval", "1s").Run()); code != 122 {
		t.Errorf("--interval without --watch: exit %d, want 122", code)
	}
}

// TestInstallInRealSystemd installs, inspects, runs and uninstalls the
// units in a real systemd (a throwaway container), with this test binary
// bound in as /usr/local/bin/hostfork and as its companion
// /usr/local/bin/hostfork-serve beside it.
func TestInstallInRealSystemd(t *testing.T) {
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	n := testutil.BootSystemd(t, testutil.NspawnOptions{ReadOnlyBinds: []string{self + ":/usr/local/bin/hostfork", self + ":/usr/local/bin/" + cli.CompanionName}})
	const root = "/var/lib/hostfork-support-test"
	u := support.UnitsFor(root, false)
	hf := func(args ...string) (string, int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		cmd := n.Command(ctx, append([]string{"/usr/local/bin/hostfork", "--root", root}, args...)...)
		cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"}
		out, err := cmd.CombinedOutput()
		return string(out), exitCode(err)
	}
	sh := func(args ...string) (string, int) {
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		out, err := n.Command(ctx, args...).CombinedOutput()
		return strings.TrimSpace(string(out)), exitCode(err)
	}

	out, code := hf("support", "plan", "--system")
	if code != 0 || !strings.Contains(out, "systemctl enable --now "+u.ReapTimer) || strings.Contains(out, "no systemd manager") {
		t.Fatalf("plan: exit %d\n%s", code, out)
	}
	t0 := time.Now()
	out, code = hf("support", "install", "--system")
	if code != 0 {
		t.Fatalf("install: exit %d\n%s", code, out)
	}
	t.Logf("install took %v:\n%s", time.Since(t0).Round(time.Millisecond), out)
	for _, u := range []string{u.ReapService, u.ReapTimer, u.FinalizeService} {
		st, err := os.Stat(n.Path("/etc/systemd/system/" + u))
		if err != nil || st.Mode().Perm() != 0o644 {
			t.Fatalf("%s: %v %v", u, st, err)
		}
	}
	b, _ := os.ReadFile(n.Path("/etc/systemd/system/" + u.ReapService))
	if !strings.Contains(string(b), "ExecStart=/usr/local/bin/hostfork --root "+root+" reap\n") {
		t.Fatalf("service:\n%s", b)
	}
	if s, _ := sh("systemctl", "is-enabled", u.ReapTimer); s != "enabled" {
		t.Errorf("timer is-enabled: %s", s)
	}
	if s, _ := sh("systemctl", "is-active", u.ReapTimer); s != "active" {
		t.Errorf("timer is-active: %s", s)
	}
	out, code = hf("support", "install", "--system")
	if code != 0 || !strings.Contains(out, "nothing changed") {
		t.Fatalf("re-install: exit %d\n%s", code, out)
	}
	out, code = hf("support", "status", "--system")
	if code != 0 || !strings.Contains(out, "installed and current") || !strings.Contains(out, "is-enabled=enabled is-active=active") {
		t.Fatalf("status: exit %d\n%s", code, out)
	}

	// The timer's service, run once now, succeeds.
	if s, code := sh("systemctl", "start", u.ReapService); code != 0 {
		j, _ := sh("journalctl", "-u", u.ReapService, "--no-pager", "-o", "cat")
		t.Fatalf("systemctl start %s: exit %d: %s\n%s", u.ReapService, code, s, j)
	}
	s, _ := sh("systemctl", "show", u.ReapService, "-p", "Result", "-p", "ExecMainStatus", "-p", "ExecMainCode")
	if !strings.Contains(s, "Result=success") || !strings.Contains(s, "ExecMainStatus=0") {
		t.Fatalf("reap service: %s", s)
	}
	s, _ = sh("journalctl", "-u", u.ReapService, "--no-pager", "-o", "cat")
	if !strings.Contains(s, "checked 0 environment(s)") {
		t.Errorf("reap service output:\n%s", s)
	}
	// The finalizer template runs a full reap for one environment id.
	if s, code := sh("systemctl", "start", strings.Replace(u.FinalizeService, "@.", "@abc123.", 1)); code != 0 {
		t.Fatalf("finalizer: exit %d: %s", code, s)
	}

	// A unit written by another version is a finding; install repairs it.
	svc := n.Path("/etc/systemd/system/" + u.ReapService)
	stale := strings.Replace(string(b), "X-Hostfork-Version=", "X-Hostfork-Version=v0.0.1-old", 1)
	if err := os.WriteFile(svc, []byte(stale), 0o644); err != nil {
		t.Fatal(err)
	}
	out, code = hf("support", "status", "--system")
	if code != 1 || !strings.Contains(out, "a stale installation") {
		t.Fatalf("status of a stale unit: exit %d\n%s", code, out)
	}
	out, code = hf("support", "install", "--system")
	if code != 0 || !strings.Contains(out, "wrote     /etc/systemd/system/"+u.ReapService) || !strings.Contains(out, "daemon-reload") {
		t.Fatalf("repairing install: exit %d\n%s", code, out)
	}

	envID := serveThroughSocket(t, n, root, hf, sh)

	out, code = hf("support", "uninstall", "--system")
	if code != 0 || strings.Count(out, "removed ") != 5 || !strings.Contains(out, "1 active run(s)") || !strings.Contains(out, "(environment "+envID+") alive: sleep 300") {
		t.Fatalf("uninstall: exit %d\n%s", code, out)
	}
	t.Logf("uninstall:\n%s", out)
	for _, u := range []string{u.ReapService, u.ReapTimer, u.FinalizeService, u.ServeSocket, u.ServeService} {
		if _, err := os.Stat(n.Path("/etc/systemd/system/" + u)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s still there: %v", u, err)
		}
	}
	if s, _ := sh("systemctl", "is-enabled", u.ReapTimer); s == "enabled" {
		t.Errorf("timer still enabled after uninstall")
	}
	for _, u := range []string{u.ServeSocket, u.ServeService} {
		if s, _ := sh("systemctl", "is-active", u); s == "active" {
			t.Errorf("%s still active after uninstall", u)
		}
	}
	if _, err := os.Lstat(n.Path(root + "/api.sock")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the API socket is still there after uninstall: %v", err)
	}
	// The run made through the server outlived the server and the units.
	out, code = hf("status", "--json", envID)
	if code != 0 || !strings.Contains(out, `"state": "alive"`) {
		t.Errorf("the environment made through the server after uninstall: exit %d\n%s", code, out)
	}
	if out, code = hf("stop", envID); code != 0 {
		t.Errorf("stop %s: exit %d\n%s", envID, code, out)
	}
	if _, err := os.Stat(n.Path(root + "/registry.sqlite")); err != nil {
		t.Errorf("uninstall touched the store: %v", err)
	}
	out, code = hf("support", "status", "--system")
	if code != 0 || !strings.Contains(out, "not installed") {
		t.Fatalf("status after uninstall: exit %d\n%s", code, out)
	}
}

// TestUninstallListsActiveRuns: uninstall names the runs that lose their
// recovery path before it removes anything (here: a user unit directory of
// the test's own, with nothing installed in it).
func TestUninstallListsActiveRuns(t *testing.T) {
	parent := testutil.CgroupParent(t)
	hf := hostforkLink(t)
	root := filepath.Join(t.TempDir(), "store")
	env := append(os.Environ(), "HOSTFORK_CGROUP_PARENT="+parent, "XDG_CONFIG_HOME="+t.TempDir())
	run := func(args ...string) (string, int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, hf, append([]string{"--root", root}, args...)...)
		cmd.Env = env
		out, err := cmd.CombinedOutput()
		return string(out), exitCode(err)
	}
	out, code := run("run", "--detach", "--ttl", "1m", "--", "sleep", "300")
	if code != 0 {
		t.Fatalf("run --detach: exit %d\n%s", code, out)
	}
	envID := strings.TrimSpace(out)
	t.Cleanup(func() { run("stop", envID) })
	out, code = run("support", "uninstall", "--user")
	if code != 0 {
		t.Fatalf("uninstall: exit %d\n%s", code, out)
	}
	if !strings.Contains(out, "1 active run(s)") || !strings.Contains(out, "(environment "+envID+") alive: sleep 300") {
		t.Fatalf("uninstall did not list the active run:\n%s", out)
	}
	if !strings.Contains(out, "nothing of hostfork's was installed") || !strings.Contains(out, "retained data in "+root+" is kept") {
		t.Errorf("uninstall output:\n%s", out)
	}
	if i, j := strings.Index(out, "active run(s)"), strings.Index(out, "nothing of hostfork's"); i > j {
		t.Errorf("active runs listed after the removal:\n%s", out)
	}
}

// serveThroughSocket checks the installed API units: the socket listens
// (0660), its first connection starts the server, the CLI runs verbs
// through it (--host) with the same results as in-process, a run made
// through it outlives the server's stop, and the next connection starts
// the server again. It returns the id of an environment left running.
func serveThroughSocket(t *testing.T, n *testutil.Nspawn, root string, hf, sh func(args ...string) (string, int)) string {
	u := support.UnitsFor(root, false)
	t.Helper()
	sock := root + "/api.sock"
	host := func(args ...string) (string, string, int) {
		t.Helper()
		ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
		defer cancel()
		cmd := n.Command(ctx, append([]string{"/usr/local/bin/hostfork", "--host", "unix://" + sock}, args...)...)
		cmd.Env = []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "HOME=/root"}
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		err := cmd.Run()
		return stdout.String(), stderr.String(), exitCode(err)
	}
	for _, u := range []string{u.ServeSocket} {
		if s, _ := sh("systemctl", "is-enabled", u); s != "enabled" {
			t.Errorf("%s is-enabled: %s", u, s)
		}
		if s, _ := sh("systemctl", "is-active", u); s != "active" {
			t.Errorf("%s is-active: %s", u, s)
		}
	}
	st, err := os.Lstat(n.Path(sock))
	if err != nil || st.Mode()&os.ModeSocket == 0 || st.Mode().Perm() != 0o660 {
		t.Fatalf("the API socket %s: %v %v", sock, st, err)
	}
	if s, _ := sh("systemctl", "is-active", u.ServeService); s == "active" {
		t.Errorf("the server runs before anything connected")
	}

	// The first connection starts the server; a foreground run streams its
	// output and exits with the command's status.
	out, errOut, code := host("run", "--ttl", "1m", "--", "sh", "-c", "echo hello; echo oops >&2; exit 3")
	if code != 3 || out != "hello\n" || errOut != "oops\n" {
		t.Fatalf("run through the socket: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	if s, _ := sh("systemctl", "is-active", u.ServeService); s != "active" {
		t.Errorf("%s after a connection: %s", u.ServeService, s)
	}
	j, _ := sh("journalctl", "-u", u.ServeService, "--no-pager", "-o", "cat")
	if !strings.Contains(j, "listening on unix://"+sock) || !strings.Contains(j, "socket activation") {
		t.Errorf("the server's journal:\n%s", j)
	}
	remote, _, code := host("ps", "--all", "--json")
	local, lcode := hf("ps", "--all", "--json")
	if code != 0 || lcode != 0 || remote != local || !strings.Contains(remote, `"sh",`) {
		t.Errorf("ps --all --json through the server (exit %d) and in-process (exit %d) differ:\n%s\n---\n%s", code, lcode, remote, local)
	}
	out, _, code = host("status", "zzzzzz")
	if code != 119 {
		t.Errorf("status of an unknown id through the server: exit %d", code)
	}

	// A detached run outlives the server's stop; the next connection
	// starts the server again, which finds it.
	out, errOut, code = host("run", "--detach", "--ttl", "2m", "--", "sleep", "300")
	if code != 0 {
		t.Fatalf("run --detach through the socket: exit %d: %s", code, errOut)
	}
	envID := strings.TrimSpace(out)
	if s, code := sh("systemctl", "stop", u.ServeService); code != 0 {
		t.Fatalf("systemctl stop %s: exit %d: %s", u.ServeService, code, s)
	}
	if s, _ := sh("systemctl", "is-active", u.ServeSocket); s != "active" {
		t.Errorf("the socket after the server stopped: %s", s)
	}
	out, code = hf("status", "--json", envID)
	if code != 0 || !strings.Contains(out, `"state": "alive"`) {
		t.Fatalf("the detached run after the server stopped: exit %d\n%s", code, out)
	}
	out, _, code = host("status", "--json", envID)
	if code != 0 || !strings.Contains(out, `"state": "alive"`) {
		t.Fatalf("status through the socket after the server stopped: exit %d\n%s", code, out)
	}
	if s, _ := sh("systemctl", "is-active", u.ServeService); s != "active" {
		t.Errorf("%s after the next connection: %s", u.ServeService, s)
	}
	return envID
}
