package main

// Trust tests of the view's targets (issue 39, item 1; issue 35, §4): a
// mount target under a directory another user can write must never let
// that user choose what root covers. The planner resolves targets by
// descriptors and refuses such a target unless the operator allows it;
// the keeper opens every target again inside the view without following
// any symbolic link.

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// adversaryExchange swaps the names a and b (renameat2 RENAME_EXCHANGE)
// as fast as it can until stopped: one of them is a directory, the other a
// symbolic link, so that a name resolved twice may be either.
func adversaryExchange(a, b string, stop <-chan os.Signal) string {
	n := 0
	for {
		select {
		case <-stop:
			return fmt.Sprintf("exchanged=%d", n)
		default:
		}
		if unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_EXCHANGE) == nil {
			n++
		}
	}
}

// viewTargetSetup makes what the attacks below share: a directory d that
// u owns, a root-only victim directory holding "keep", and a tree source
// only root can write whose "keep" says it is the tree's.
func viewTargetSetup(t *testing.T, u *trustUser) (d, victim, src string) {
	t.Helper()
	d = u.ownDir(t)
	victim = trustVictim(t, t.TempDir(), "victim")
	if err := os.WriteFile(filepath.Join(victim, "keep"), []byte("root's\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src = filepath.Join(t.TempDir(), "src")
	if err := os.Mkdir(src, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "keep"), []byte("the tree's\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return d, victim, src
}

// The reproduction without a race: another user's directory holds
// a symbolic link to a root-only directory, named as a --replace target.
// It is refused whether or not untrusted targets are allowed (a link there
// is never followed), nothing covers the victim, and the victim is
// unchanged. A real directory of that user's is refused too unless the
// operator allows it, and then it is that directory that is covered.
func TestTrustViewTargetLink(t *testing.T) {
	c := newCLI(t)
	u := newTrustUser(t)
	d, victim, src := viewTargetSetup(t, u)
	before := trustSnapshot(t, victim)
	u.must(t, "ln", "-s", victim, filepath.Join(d, "work"))
	u.must(t, "mkdir", filepath.Join(d, "real"))

	for _, extra := range [][]string{nil, {"--allow-untrusted-targets"}} {
		args := append([]string{"run"}, extra...)
		args = append(args, "--tree", "w=copy:"+src, "--replace", filepath.Join(d, "work")+"=w", "--", "cat", filepath.Join(victim, "keep"))
		r := c.run(args...)
		if r.code != 122 || !strings.Contains(r.stderr, "symbolic link") || !strings.Contains(r.stderr, "name the real path") {
			t.Errorf("a link in another user's directory as a target (%v): want exit 122 naming the link and the fix: %v", extra, r)
		}
		if strings.Contains(r.stdout, "the tree's") {
			t.Errorf("the tree was mounted over the root-only directory: %v", r)
		}
	}

	real := filepath.Join(d, "real")
	r := c.run("run", "--tree", "w=copy:"+src, "--replace", real+"=w", "--", "cat", filepath.Join(real, "keep"))
	if r.code != 122 || !strings.Contains(r.stderr, "uid "+fmt.Sprint(u.uid)) || !strings.Contains(r.stderr, "--allow-untrusted-targets") {
		t.Errorf("a target in another user's directory: want exit 122 naming the owner and --allow-untrusted-targets: %v", r)
	}
	plan := c.mustRun("plan", "--allow-untrusted-targets", "--tree", "w=copy:"+src, "--replace", real+"=w")
	if !strings.Contains(plan.stdout, "untrusted target, allowed") {
		t.Errorf("plan does not show the allowed untrusted target:\n%s", plan.stdout)
	}
	r = c.mustRun("run", "--allow-untrusted-targets", "--tree", "w=copy:"+src, "--replace", real+"=w", "--", "cat", filepath.Join(real, "keep"), filepath.Join(victim, "keep"))
	if r.stdout != "the tree's\nroot's\n" {
		t.Errorf("allowed: the tree should cover the user's directory and nothing else: %q", r.stdout)
	}
	trustSame(t, "the victim", victim, before)
}

// The race form: the other user exchanges their directory and a symbolic
// link to a root-only directory as fast as they can while root runs with
// untrusted targets allowed, for 60 rounds. Each run either covers the
// user's directory or fails naming the link; the root-only directory is
// never covered and never changes.
func TestTrustViewTargetRace(t *testing.T) {
	c := newCLI(t)
	u := newTrustUser(t)
	bin := hostforkForUser(t)
	d, victim, src := viewTargetSetup(t, u)
	before := trustSnapshot(t, victim)
	proj, link := filepath.Join(d, "proj"), filepath.Join(d, "link")
	u.must(t, "mkdir", proj)
	u.must(t, "ln", "-s", victim, link)
	adv := u.startAdversary(t, bin, "exchange", proj, link)
	outcomes := map[string]int{}
	for i := 0; i < 60; i++ {
		r := c.run("run", "--allow-untrusted-targets", "--tree", "w=copy:"+src, "--replace", proj+"=w", "--", "cat", filepath.Join(victim, "keep"))
		switch {
		case r.code == 0 && r.stdout == "root's\n":
			outcomes["covered the user's directory"]++
		case r.code == 122 && strings.Contains(r.stderr, "symbolic link"):
			outcomes["refused in the plan"]++
		case r.code != 0 && strings.Contains(r.stderr, "symbolic link, which hostfork never follows"):
			outcomes["refused by the keeper"]++
		default:
			t.Errorf("round %d: %v", i, r)
		}
	}
	t.Logf("adversary: %s; outcomes: %v", adv.stop(), outcomes)
	trustSame(t, "the victim", victim, before)
}

// A missing mount point inside a private tree is made inside the view,
// by descriptors: a symbolic link the tree holds (here to a root-only
// directory) is not followed out of it, so nothing is created on the host.
func TestTrustViewMkdirThroughTreeLink(t *testing.T) {
	c := newCLI(t)
	base := t.TempDir()
	victim := trustVictim(t, t.TempDir(), "victim")
	before := trustSnapshot(t, victim)
	src := filepath.Join(base, "src")
	target := filepath.Join(base, "target")
	for _, dir := range []string{src, target} {
		if err := os.Mkdir(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(victim, filepath.Join(src, "cache")); err != nil {
		t.Fatal(err)
	}
	r := c.run("run", "--tree", "w=copy:"+src, "--replace", target+"=w", "--scratch", filepath.Join(target, "cache", "made"), "--", "true")
	if r.code == 0 || !strings.Contains(r.stderr, "symbolic link, which hostfork never follows") {
		t.Errorf("a mount point through a link inside the tree: want a refusal naming the link: %v", r)
	}
	if _, err := os.Lstat(filepath.Join(victim, "made")); err == nil {
		t.Errorf("a directory was created on the host through the tree's link")
	}
	trustSame(t, "the victim", victim, before)
}

// Tree sources (issue 39, item 3): a source in another user's directory is
// opened once, without following a link from a directory they can write,
// checked against what the plan saw, and that descriptor is what is copied
// or mounted. A source named through their link to a root-only directory
// is refused; while they exchange their directory and such a link, each
// run gets their directory or is refused, and root's files never enter the
// tree.
func TestTrustTreeSourceRace(t *testing.T) {
	c := newCLI(t)
	u := newTrustUser(t)
	bin := hostforkForUser(t)
	d := u.ownDir(t)
	victim := trustVictim(t, t.TempDir(), "victim")
	before := trustSnapshot(t, victim)
	target := t.TempDir()
	proj, link := filepath.Join(d, "proj"), filepath.Join(d, "link")
	u.must(t, "mkdir", proj)
	u.must(t, "sh", "-c", "echo theirs > "+filepath.Join(proj, "mine"))
	u.must(t, "ln", "-s", victim, link)

	for _, kind := range []string{"copy", "overlay"} {
		r := c.run("run", "--tree", "w="+kind+":"+link, "--replace", target+"=w", "--", "ls", target)
		if r.code != 122 || !strings.Contains(r.stderr, "symbolic link") || strings.Contains(r.stdout, "precious") {
			t.Errorf("%s of a link in another user's directory: want exit 122 naming the link: %v", kind, r)
		}
	}

	adv := u.startAdversary(t, bin, "exchange", proj, link)
	outcomes := map[string]int{}
	for _, kind := range []string{"copy", "overlay"} {
		for i := 0; i < 40; i++ {
			r := c.run("run", "--tree", "w="+kind+":"+proj, "--replace", target+"=w", "--", "ls", target)
			switch {
			case strings.Contains(r.stdout, "precious") || strings.Contains(r.stdout, "inner"):
				t.Errorf("%s round %d: root's files entered the tree: %v", kind, i, r)
			case r.code == 0 && r.stdout == "mine\n":
				outcomes[kind+": their directory"]++
			case r.code != 0 && (strings.Contains(r.stderr, "symbolic link") || strings.Contains(r.stderr, "no longer the directory planned")):
				outcomes[kind+": refused"]++
			default:
				t.Errorf("%s round %d: %v", kind, i, r)
			}
		}
	}
	t.Logf("adversary: %s; outcomes: %v", adv.stop(), outcomes)
	trustSame(t, "the victim", victim, before)
}
