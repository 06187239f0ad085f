package main

// Trust tests (issue 10, "Local users must not get in", and the forged
// receipt and host mount classes): each drives the built CLI on the real
// kernel, as root, against a real second, unprivileged user created for the
// test and removed when it ends (also when it fails), and races that user's
// swaps where the class is about a swap. docs/security.md lists which rule
// each test holds hostfork to.

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/fault"
	"github.com/habemus-papadum/hostfork/internal/storage"
	"github.com/habemus-papadum/hostfork/internal/supervise"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// ---------------------------------------------------------------------------
// The other user.

// trustUser is a real, unprivileged second user of this host: the adversary
// of DESIGN.md, "Trust model". It has no home directory and no login shell.
type trustUser struct {
	name     string
	uid, gid int
}

// newTrustUser creates a throwaway user and removes it when the test ends,
// also when it fails (register it before anything that starts processes as
// that user, so that those are gone when userdel runs).
func newTrustUser(t *testing.T) *trustUser {
	t.Helper()
	u := testutil.NewUser(t, "hft", testutil.UserOptions{})
	return &trustUser{name: u.Name, uid: u.UID, gid: u.GID}
}

// command returns an unstarted program run as u, with no supplementary
// groups and a minimal environment.
func (u *trustUser) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	cmd.Env = []string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=/", "LC_ALL=C"}
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: uint32(u.uid), Gid: uint32(u.gid), Groups: []uint32{}}}
	return cmd
}

// run runs a program as u to completion: its combined output and status.
func (u *trustUser) run(t *testing.T, name string, args ...string) (string, int) {
	t.Helper()
	out, err := u.command(name, args...).CombinedOutput()
	if err != nil {
		var ee *exec.ExitError
		if !errors.As(err, &ee) {
			t.Fatalf("running %s as %s: %v", name, u.name, err)
		}
		return string(out), ee.ExitCode()
	}
	return string(out), 0
}

// must runs a program as u and requires success.
func (u *trustUser) must(t *testing.T, name string, args ...string) string {
	t.Helper()
	out, code := u.run(t, name, args...)
	if code != 0 {
		t.Fatalf("as %s: %s %s: exit %d: %s", u.name, name, strings.Join(args, " "), code, out)
	}
	return out
}

// ownDir makes a new directory in /tmp owned by u (mode 0755), as u's
// own; root removes it at cleanup.
func (u *trustUser) ownDir(t *testing.T) string {
	t.Helper()
	d, err := os.MkdirTemp("/tmp", "hf-trust-"+u.name+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(d) })
	if err := os.Chown(d, u.uid, u.gid); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(d, 0o755); err != nil {
		t.Fatal(err)
	}
	return d
}

// ---------------------------------------------------------------------------
// The adversary: this test binary, run as the other user in a mode chosen
// by trustAdversaryVar, swapping names as fast as it can until SIGTERM.

const trustAdversaryVar = "HOSTFORK_TRUST_ADVERSARY"

func init() {
	if mode := os.Getenv(trustAdversaryVar); mode != "" {
		os.Exit(trustAdversary(mode, os.Args[1:]))
	}
}

// trustAdversary runs one adversary mode; it prints "ready" when it starts
// and its counts when it is told to stop.
func trustAdversary(mode string, args []string) int {
	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	fmt.Println("ready")
	switch mode {
	case "export":
		if len(args) != 4 {
			fmt.Println("usage: export PARENT NAME VICTIM all|dest")
			return 2
		}
		fmt.Println(adversaryExport(args[0], args[1], args[2], args[3] == "all", stop))
		return 0
	case "exchange":
		if len(args) != 2 {
			fmt.Println("usage: exchange A B")
			return 2
		}
		fmt.Println(adversaryExchange(args[0], args[1], stop))
		return 0
	}
	fmt.Println("unknown adversary mode", mode)
	return 2
}

// adversaryExport attacks an export into parent/name, a directory this
// user owns: it renames hostfork's partial copy aside and puts a symbolic
// link to victim at its name (so that anything still resolving that name
// goes to victim), plants a link to victim at the destination's name while
// the copy runs (racing its final rename), and swaps the subdirectories of
// a finished destination for links to victim (catching any metadata pass by
// path after the rename). Unless swapPartial, it leaves the partial copy
// alone, so that the export can finish and its destination be attacked.
func adversaryExport(parent, name, victim string, swapPartial bool, stop <-chan os.Signal) string {
	var swapped, planted, inner, n int
	prefix := "." + name + ".partial-"
	dst := filepath.Join(parent, name)
	for {
		select {
		case <-stop:
			return fmt.Sprintf("swapped=%d planted=%d inner=%d", swapped, planted, inner)
		default:
		}
		ents, _ := os.ReadDir(parent)
		copying := false
		for _, e := range ents {
			if !strings.HasPrefix(e.Name(), prefix) {
				continue
			}
			copying = true
			if !swapPartial || e.Type()&fs.ModeSymlink != 0 {
				continue
			}
			p := filepath.Join(parent, e.Name())
			n++
			if os.Rename(p, filepath.Join(parent, fmt.Sprintf(".aside-%d", n))) == nil {
				swapped++
				_ = os.Symlink(victim, p)
			}
		}
		fi, err := os.Lstat(dst)
		switch {
		case err != nil && copying:
			if os.Symlink(victim, dst) == nil {
				planted++
				time.Sleep(20 * time.Microsecond)
				_ = os.Remove(dst)
				if !swapPartial {
					// Mostly absent, so that the copy's rename can win.
					time.Sleep(500 * time.Microsecond)
				}
			}
		case err == nil && fi.IsDir():
			subs, _ := os.ReadDir(dst)
			for _, s := range subs {
				if !s.IsDir() || strings.HasSuffix(s.Name(), ".aside") {
					continue
				}
				p := filepath.Join(dst, s.Name())
				if os.Rename(p, p+".aside") == nil {
					inner++
					_ = os.Symlink(victim, p)
				}
			}
		}
	}
}

// trustAdversaryProc is a running adversary.
type trustAdversaryProc struct {
	cmd    *exec.Cmd
	out    *bufio.Reader
	done   bool
	result string
}

// startAdversary starts bin (a copy of this binary u can execute, from
// hostforkForUser) as u in mode, and waits until it runs. It is stopped by
// its PID at cleanup if the test did not stop it.
func (u *trustUser) startAdversary(t *testing.T, bin, mode string, args ...string) *trustAdversaryProc {
	t.Helper()
	cmd := u.command(bin, args...)
	cmd.Args[0] = "hostfork-trust-adversary"
	cmd.Env = append(cmd.Env, trustAdversaryVar+"="+mode)
	pipe, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	a := &trustAdversaryProc{cmd: cmd, out: bufio.NewReader(pipe)}
	t.Cleanup(func() { a.stop() })
	line, err := a.out.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "ready" {
		t.Fatalf("adversary %s did not start: %q %v", mode, line, err)
	}
	return a
}

// stop ends the adversary (SIGTERM by PID, SIGKILL after a bound) and
// returns what it reported.
func (a *trustAdversaryProc) stop() string {
	if a.done {
		return a.result
	}
	a.done = true
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	res := make(chan string, 1)
	go func() {
		b, _ := io.ReadAll(a.out)
		res <- strings.TrimSpace(string(b))
	}()
	select {
	case a.result = <-res:
	case <-time.After(10 * time.Second):
		_ = a.cmd.Process.Kill()
		a.result = <-res
	}
	_ = a.cmd.Wait()
	return a.result
}

// ---------------------------------------------------------------------------
// Victims: root-only directories whose survival, byte for byte, is checked.

// trustEntry is what is compared of one file of a victim.
type trustEntry struct {
	mode     fs.FileMode
	uid, gid uint32
	sum      string // regular files: sha256 of the content
	link     string // symbolic links: the target
}

func (e trustEntry) String() string {
	s := fmt.Sprintf("%v uid %d gid %d", e.mode, e.uid, e.gid)
	if e.sum != "" {
		s += " sha256 " + e.sum[:12]
	}
	if e.link != "" {
		s += " -> " + e.link
	}
	return s
}

// trustVictim makes a root-only directory dir (mode 0700, inside a 0700
// directory) holding files, a subdirectory and a link, and returns it.
func trustVictim(t *testing.T, parent, name string) string {
	t.Helper()
	v := filepath.Join(parent, name)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.Mkdir(v, 0o700))
	must(os.WriteFile(filepath.Join(v, "precious"), []byte("root's own data, which nobody may change\n"), 0o600))
	must(os.WriteFile(filepath.Join(v, "config"), []byte("setting = 1\n"), 0o644))
	must(os.Mkdir(filepath.Join(v, "inner"), 0o700))
	must(os.WriteFile(filepath.Join(v, "inner", "deep"), []byte("deep\n"), 0o600))
	must(os.Symlink("precious", filepath.Join(v, "link")))
	must(os.Chmod(v, 0o700))
	return v
}

// trustSnapshot records dir and everything below it, without following
// symbolic links.
func trustSnapshot(t *testing.T, dir string) map[string]trustEntry {
	t.Helper()
	snap := map[string]trustEntry{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st unix.Stat_t
		if err := unix.Lstat(p, &st); err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		e := trustEntry{mode: fs.FileMode(st.Mode & 0o7777), uid: st.Uid, gid: st.Gid}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFREG:
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			s := sha256.Sum256(b)
			e.sum = hex.EncodeToString(s[:])
		case unix.S_IFLNK:
			e.link, _ = os.Readlink(p)
			e.mode |= fs.ModeSymlink
		case unix.S_IFDIR:
			e.mode |= fs.ModeDir
		}
		snap[rel] = e
		return nil
	})
	if err != nil {
		t.Fatalf("snapshot of %s: %v", dir, err)
	}
	return snap
}

// trustSame fails the test unless dir is exactly as before: no entry
// added, removed, or changed in content, mode or owner.
func trustSame(t *testing.T, what, dir string, before map[string]trustEntry) {
	t.Helper()
	if _, err := os.Lstat(dir); err != nil {
		t.Errorf("%s: %s is gone: %v", what, dir, err)
		return
	}
	after := trustSnapshot(t, dir)
	var diffs []string
	for p, b := range before {
		a, ok := after[p]
		switch {
		case !ok:
			diffs = append(diffs, "deleted "+p)
		case a != b:
			diffs = append(diffs, fmt.Sprintf("changed %s: %v, was %v", p, a, b))
		}
	}
	for p := range after {
		if _, ok := before[p]; !ok {
			diffs = append(diffs, "written "+p)
		}
	}
	sort.Strings(diffs)
	if len(diffs) > 0 {
		t.Errorf("%s: %s, which hostfork did not create, was changed: %s", what, dir, strings.Join(diffs, "; "))
	}
}

// ---------------------------------------------------------------------------
// Small helpers.

// trustJSON runs hostfork with args (which print JSON) and decodes it.
func (c *hostforkCLI) trustJSON(args ...string) any {
	c.t.Helper()
	r := c.mustRun(args...)
	var v any
	if err := json.Unmarshal([]byte(r.stdout), &v); err != nil {
		c.t.Fatalf("hostfork %s: not JSON: %v\n%s", strings.Join(args, " "), err, r.stdout)
	}
	return v
}

// field returns m[path...] through nested objects ("" / nil if absent).
func trustField(v any, path ...string) any {
	for _, p := range path {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[p]
	}
	return v
}

// trustCommand is the status --json record of command id.
func (c *hostforkCLI) trustCommand(id string) map[string]any {
	c.t.Helper()
	m, _ := c.trustJSON("status", "--json", id).(map[string]any)
	return m
}

// trustPS is ps --all --json, as maps.
func (c *hostforkCLI) trustPS() []map[string]any {
	c.t.Helper()
	var rows []map[string]any
	for _, r := range c.trustJSON("ps", "--all", "--json").([]any) {
		rows = append(rows, r.(map[string]any))
	}
	return rows
}

// trustFileID is the identity hostfork records for a directory (safefs.FileID).
func trustFileID(t *testing.T, p string) (dev, ino, fsid uint64) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		t.Fatal(err)
	}
	var sf unix.Statfs_t
	if err := unix.Statfs(p, &sf); err != nil {
		t.Fatal(err)
	}
	return st.Dev, st.Ino, uint64(uint32(sf.Fsid.Val[0]))<<32 | uint64(uint32(sf.Fsid.Val[1]))
}

// forgeIntent adds a pending ledger entry of kind for target to the
// environment env, without an identity, as a forger editing the registry
// would.
func (c *hostforkCLI) forgeIntent(env, kind, target string) {
	c.exec(`insert into intents (env_id, command_id, rev, kind, target, state, identity, error, created_at, settled_at)
		values (?, '', 1, ?, ?, 'pending', '', '', ?, 0)`, env, kind, target, time.Now().UnixNano())
}

// trustEditEnv rewrites environment id's JSON record in the registry, as
// someone who could replace the registry would.
func (c *hostforkCLI) trustEditEnv(id string, edit func(m map[string]any)) {
	c.t.Helper()
	raw := c.query("select data from envs where id = '" + id + "'")
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.UseNumber()
	var m map[string]any
	if err := dec.Decode(&m); err != nil {
		c.t.Fatalf("env %s record: %v", id, err)
	}
	edit(m)
	b, err := json.Marshal(m)
	if err != nil {
		c.t.Fatal(err)
	}
	c.exec("update envs set data = ? where id = ?", string(b), id)
}

// trustRefusal checks a refusal with the store's exit status 123: one
// line on stderr that names want (a path) and says what to do instead.
func trustRefusal(t *testing.T, r cliResult, want string) {
	t.Helper()
	if r.code != 123 {
		t.Errorf("want exit 123 (store refused): %v", r)
		return
	}
	if r.stdout != "" || strings.Count(r.stderr, "\n") != 1 || !strings.HasPrefix(r.stderr, "hostfork: ") {
		t.Errorf("want exactly one line on stderr: %v", r)
	}
	if !strings.Contains(r.stderr, want) {
		t.Errorf("the refusal does not name %s: %s", want, r.stderr)
	}
	if !regexp.MustCompile(`choose|restore|remove|move|chmod|name the real|use your own|with --root`).MatchString(r.stderr) {
		t.Errorf("the refusal does not say what to do instead: %s", r.stderr)
	}
}

// ---------------------------------------------------------------------------
// Class 1: writes through symlinks.

// Root exports into a directory another user owns while that user swaps
// symbolic links to a root-only directory in for hostfork's partial copy,
// for the destination and for the finished copy's subdirectories, as fast
// as it can. Nothing lands in the root-only directory and its mode and
// content don't change, whatever the export's outcome; an existing
// destination (a link, a directory) and a destination reached through a
// link are refused.
func TestTrustExportRace(t *testing.T) {
	c := newCLI(t)
	u := newTrustUser(t)
	bin := hostforkForUser(t)
	work := t.TempDir()
	src := filepath.Join(work, "src")
	tgt := filepath.Join(work, "target")
	for _, d := range []string{src, tgt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	// Directories open to all, so that an export built where others could
	// enter it would be attackable below its top; the top gets 0777 as
	// well, which is what the victim's mode became in issue 10.
	files := 0
	for i := 0; i < 4; i++ {
		d := filepath.Join(src, fmt.Sprintf("d%d", i))
		if err := os.Mkdir(d, 0o777); err != nil {
			t.Fatal(err)
		}
		for j := 0; j < 250; j++ {
			if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%03d", j)), []byte(fmt.Sprintf("file %d/%d\n", i, j)), 0o644); err != nil {
				t.Fatal(err)
			}
			files++
		}
		if err := os.Chmod(d, 0o777); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(src, 0o777); err != nil {
		t.Fatal(err)
	}
	victim := trustVictim(t, t.TempDir(), "victim")
	before := trustSnapshot(t, victim)
	env := firstLine(c.mustRun("create", "--tree", "w=copy:"+src, "--replace", tgt+"=w", "--ttl", "5m").stdout)
	parent := u.ownDir(t)

	t.Run("control", func(t *testing.T) {
		// Without an adversary the export is complete and keeps modes, so
		// the race below attacks a copy that really happens.
		c := c.with(t)
		dst := filepath.Join(parent, "control")
		c.mustRun("export", env, "w", "--to", dst)
		n := 0
		_ = filepath.WalkDir(dst, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Type().IsRegular() {
				n++
			}
			return nil
		})
		if n != files {
			t.Errorf("the export holds %d files, want %d", n, files)
		}
		for _, p := range []string{dst, filepath.Join(dst, "d0")} {
			if fi, err := os.Lstat(p); err != nil || fi.Mode().Perm() != 0o777 || !fi.IsDir() {
				t.Errorf("%s: %v %v, want a directory with the source's mode 0777", p, fi.Mode(), err)
			}
		}
	})

	t.Run("existing destination", func(t *testing.T) {
		c := c.with(t)
		u.must(t, "ln", "-s", victim, filepath.Join(parent, "link"))
		u.must(t, "mkdir", filepath.Join(parent, "existing"))
		for _, dst := range []string{
			filepath.Join(parent, "link"),         // a link to the victim
			filepath.Join(parent, "existing"),     // a directory
			filepath.Join(parent, "link", "into"), // below a link
		} {
			r := c.run("export", env, "w", "--to", dst)
			if r.code == 0 {
				t.Errorf("export --to %s was accepted: %v", dst, r)
			}
		}
		if ents, err := os.ReadDir(filepath.Join(parent, "existing")); err != nil || len(ents) > 0 {
			t.Errorf("the existing destination was written: %v %v", ents, err)
		}
		trustSame(t, "export to an existing destination", victim, before)
	})

	t.Run("race", func(t *testing.T) {
		c := c.with(t)
		var swaps []string
		raced := false
		for round := 0; round < 6; round++ {
			name := fmt.Sprintf("out-%d", round)
			how := "all"
			if round%2 == 1 {
				how = "dest" // the copy may finish: its destination is attacked
			}
			a := u.startAdversary(t, bin, "export", parent, name, victim, how)
			r := c.run("export", env, "w", "--to", filepath.Join(parent, name))
			stats := a.stop()
			swaps = append(swaps, fmt.Sprintf("round %d (%s): export exit %d; adversary %s", round, how, r.code, stats))
			if !strings.HasPrefix(stats, "swapped=0 ") {
				raced = true
			}
			trustSame(t, fmt.Sprintf("export round %d (%s)", round, stats), victim, before)
		}
		t.Log(strings.Join(swaps, "\n"))
		if !raced {
			t.Errorf("the adversary never caught a partial copy to swap: the race did not happen (%s)", strings.Join(swaps, "; "))
		}
		if fi, err := os.Lstat(victim); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("victim mode: %v %v, want 0700", fi.Mode(), err)
		}
	})
}

// A .hostfork-trees planted beside a Btrfs source by the owner of its
// directory (a link to a root-only directory, their own directory, a
// directory open to all) is refused by create, for snapshots and for
// copies of that source, and nothing is written through it. And when that
// user moves hostfork's own allocation area away between the allocation and
// the view (a fault pause widens the window) and puts their own at its
// name, the view still presents hostfork's snapshot: the workload's writes
// never reach the directory the swapped-in link names.
func TestTrustPlantedAllocationArea(t *testing.T) {
	mnt := testutil.LoopBtrfs(t, "")
	c := newCLI(t)
	u := newTrustUser(t)
	// The other user must be able to reach their directory on the loop
	// filesystem.
	if err := os.Chmod(filepath.Dir(mnt), 0o755); err != nil {
		t.Fatal(err)
	}
	home := filepath.Join(mnt, "home-u")
	if err := os.Mkdir(home, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chown(home, u.uid, u.gid); err != nil {
		t.Fatal(err)
	}
	src := filepath.Join(home, "src")
	if err := storage.CreateSubvolume(src); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(src, "file"), []byte("baseline\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	vault := filepath.Join(mnt, "vault")
	if err := os.Mkdir(vault, 0o700); err != nil {
		t.Fatal(err)
	}
	victim := trustVictim(t, vault, "victim")
	before := trustSnapshot(t, victim)
	tgt := filepath.Join(t.TempDir(), "target")
	if err := os.Mkdir(tgt, 0o755); err != nil {
		t.Fatal(err)
	}
	pool := filepath.Join(home, ".hostfork-trees")

	for _, tc := range []struct {
		name, kind, plant string
	}{
		{"link btrfs", "btrfs", `ln -s "$2" "$1"`},
		{"link copy", "copy", `ln -s "$2" "$1"`},
		{"their directory", "btrfs", `mkdir -m 0700 "$1"`},
		{"directory open to all", "btrfs", `mkdir -m 0777 "$1" && chmod 0777 "$1"`},
		{"their directory copy", "copy", `mkdir -m 0755 "$1"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := c.with(t)
			if err := os.RemoveAll(pool); err != nil {
				t.Fatal(err)
			}
			u.must(t, "sh", "-c", tc.plant, "sh", pool, victim)
			var planted unix.Stat_t
			if err := unix.Lstat(pool, &planted); err != nil {
				t.Fatal(err)
			}
			r := c.run("create", "--tree", "w="+tc.kind+":"+src, "--replace", tgt+"=w", "--ttl", "2m")
			if r.code == 0 {
				env := firstLine(r.stdout)
				st := c.trustJSON("status", "--json", env)
				t.Errorf("create used the planted %s: %v; trees %v", pool, r, trustField(st, "trees"))
				c.run("stop", env)
			} else if !strings.Contains(r.stderr, ".hostfork-trees") {
				t.Errorf("the refusal does not name the allocation area: %v", r)
			}
			var now unix.Stat_t
			if err := unix.Lstat(pool, &now); err != nil || now.Ino != planted.Ino || now.Mode != planted.Mode || now.Uid != planted.Uid {
				t.Errorf("the planted %s was changed: %+v, was %+v (%v)", pool, now, planted, err)
			}
			if planted.Mode&unix.S_IFMT == unix.S_IFDIR {
				if ents, _ := os.ReadDir(pool); len(ents) > 0 {
					t.Errorf("hostfork wrote into the planted directory: %s", ents[0].Name())
				}
			}
			trustSame(t, "create with a planted allocation area", victim, before)
			for _, e := range c.trustPS() {
				if e["state"] == "alive" {
					t.Errorf("a command runs after the refusal: %v", e["id"])
				}
			}
		})
	}

	t.Run("swapped before the view", func(t *testing.T) {
		c := c.with(t)
		if err := os.RemoveAll(pool); err != nil {
			t.Fatal(err)
		}
		cmd := c.command("create", "--tree", "w=btrfs:"+src, "--replace", tgt+"=w", "--ttl", "2m")
		// The create stands at tree-prepared until the swap is done.
		reached := filepath.Join(t.TempDir(), "reached")
		cmd.Env = append(cmd.Env, "HOSTFORK_FAULT=tree-prepared~60s", fault.ReachedEnv+"="+reached)
		t.Cleanup(func() { _ = os.Remove(reached) }) // a failed test does not hold it there
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		var leaf string
		eventually(t, "the snapshot is allocated", func() string {
			ents, _ := os.ReadDir(pool)
			for _, e := range ents {
				if strings.HasSuffix(e.Name(), "-w") {
					if _, err := os.Lstat(filepath.Join(pool, e.Name(), "tree")); err == nil {
						leaf = e.Name()
						return ""
					}
				}
			}
			return "no snapshot in " + pool
		})
		// The leaf is <env>-<tree>; the env id is public (the cgroup
		// directories are world-readable). The owner of home moves
		// hostfork's area aside and puts their own at its name.
		waitReached(t, reached)
		u.must(t, "sh", "-c", `mv "$1/.hostfork-trees" "$1/.moved" && mkdir -p "$1/.hostfork-trees/$2" && ln -s "$3" "$1/.hostfork-trees/$2/tree"`, "sh", home, leaf, victim)
		release(t, reached)
		err := <-done
		r := cliResult{stdout: out.String(), stderr: errb.String()}
		if err != nil {
			var ee *exec.ExitError
			if !errors.As(err, &ee) {
				t.Fatal(err)
			}
			r.code = ee.ExitCode()
		}
		if r.code == 0 {
			env := firstLine(r.stdout)
			got := c.run("exec", env, "--", "sh", "-c", "cat "+tgt+"/file; echo written-by-the-workload > "+tgt+"/from-the-workload")
			if got.stdout != "baseline\n" {
				t.Errorf("the view does not present hostfork's snapshot at %s: %v", tgt, got)
			}
			c.run("stop", env)
		} else {
			t.Logf("create refused the swapped area: %v", r)
		}
		trustSame(t, "the workload's writes after the allocation area was swapped", victim, before)
	})
}

// Overlays and copies of sources that are not on Btrfs are allocated in
// the store's own trees/, which no other user can reach: a .hostfork-trees
// planted beside such a source by its directory's owner is never used.
func TestTrustAllocationAreaInStore(t *testing.T) {
	c := newCLI(t)
	u := newTrustUser(t)
	home := u.ownDir(t)
	src := filepath.Join(home, "src")
	u.must(t, "mkdir", src)
	u.must(t, "sh", "-c", `echo base > "$1/file"`, "sh", src)
	victim := trustVictim(t, t.TempDir(), "victim")
	before := trustSnapshot(t, victim)
	u.must(t, "ln", "-s", victim, filepath.Join(home, ".hostfork-trees"))
	tgt := filepath.Join(t.TempDir(), "target")
	if err := os.Mkdir(tgt, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"overlay", "copy"} {
		t.Run(kind, func(t *testing.T) {
			c := c.with(t)
			env := firstLine(c.mustRun("create", "--tree", "w="+kind+":"+src, "--replace", tgt+"=w", "--ttl", "2m").stdout)
			r := c.mustRun("exec", env, "--", "sh", "-c", "cat "+tgt+"/file; echo new > "+tgt+"/new")
			if r.stdout != "base\n" {
				t.Errorf("the view: %v", r)
			}
			st := c.trustJSON("status", "--json", env)
			trees, _ := trustField(st, "trees").([]any)
			if len(trees) != 1 {
				t.Fatalf("trees: %v", trees)
			}
			hp, _ := trustField(trees[0], "host_path").(string)
			if !strings.HasPrefix(hp, c.root+"/trees/") {
				t.Errorf("the %s tree is at %s, not in the store's trees/", kind, hp)
			}
			c.mustRun("stop", env)
			trustSame(t, kind+" tree beside a planted link", victim, before)
		})
	}
}

// ---------------------------------------------------------------------------
// Class 2: stores that someone else controls.

// Root refuses a store that another user made, owns, or can replace
// through a directory above it — with 123, one line that names the path
// and the fix — and creates nothing in it; a root-owned sticky directory
// above the store (such as /tmp) is accepted.
func TestTrustStoreOthersControl(t *testing.T) {
	c := newCLI(t)
	u := newTrustUser(t)
	theirs := u.ownDir(t) // /tmp/hf-trust-<user>-*: theirs, 0755
	vault := t.TempDir()  // root's, 0700
	mk := func(p string, mode os.FileMode, uid, gid int) {
		t.Helper()
		if err := os.Mkdir(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chown(p, uid, gid); err != nil {
			t.Fatal(err)
		}
	}
	// Made by the other user, as they would.
	open := filepath.Join(theirs, "store")
	u.must(t, "mkdir", "-m", "0777", open)
	mk(filepath.Join(vault, "rootdir"), 0o755, 0, 0)
	private := filepath.Join(vault, "rootdir", "their-store")
	mk(private, 0o700, u.uid, u.gid)
	rootOpen := filepath.Join(vault, "open")
	mk(rootOpen, 0o777, 0, 0)
	groupW := filepath.Join(vault, "group")
	mk(groupW, 0o775, 0, u.gid)
	// Like /tmp, and reachable by the other user (so that what they can't
	// do below it is down to the store's own modes).
	sticky, err := os.MkdirTemp("/tmp", "hf-trust-sticky-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(sticky) })
	if err := os.Chmod(sticky, 0o777|os.ModeSticky); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name, root, names string
		// untouched must stay as it is: an empty directory, or absent.
		untouched string
	}{
		{"their store open to all", open, open, open},
		{"their private store", private, private, private},
		{"new store in their directory", filepath.Join(theirs, "new", "store"), theirs, filepath.Join(theirs, "new")},
		{"store in their directory", filepath.Join(theirs, "store2"), theirs, filepath.Join(theirs, "store2")},
		{"below a directory open to all", filepath.Join(rootOpen, "store"), rootOpen, filepath.Join(rootOpen, "store")},
		{"below a directory their group can write", filepath.Join(groupW, "store"), groupW, filepath.Join(groupW, "store")},
	} {
		_, err := os.Lstat(tc.untouched)
		existed := err == nil
		t.Run(tc.name, func(t *testing.T) {
			c := c.with(t)
			for _, args := range [][]string{{"ps"}, {"run", "--", "true"}, {"run", "--detach", "--ttl", "1m", "--", "sleep", "300"}} {
				r := c.run(append([]string{"--root", tc.root}, args...)...)
				trustRefusal(t, r, tc.names)
			}
			ents, err := os.ReadDir(tc.untouched)
			switch {
			case err == nil && len(ents) > 0:
				t.Errorf("hostfork created %s in the refused store %s", ents[0].Name(), tc.untouched)
			case err == nil && !existed:
				t.Errorf("hostfork created %s", tc.untouched)
			}
		})
	}
	t.Run("root-owned sticky directory above", func(t *testing.T) {
		c := c.with(t)
		root := filepath.Join(sticky, "store")
		c.mustRun("--root", root, "run", "--", "true")
		if fi, err := os.Lstat(root); err != nil || fi.Mode().Perm() != 0o700 {
			t.Errorf("the store is %v (%v), want 0700", fi.Mode(), err)
		}
	})
	// Root's store was open to all for a while (an old install, a
	// mistaken chmod); the other user left a file, a directory or a
	// symlink named like hostfork's own files at its top. hostfork refuses
	// the store, naming what they own, and changes none of it: it neither
	// follows the link nor reads, removes or chmods what is theirs.
	target := trustVictim(t, vault, "planted-link-target")
	beforeTarget := trustSnapshot(t, target)
	for _, tc := range []struct{ name, plant, refusal string }{
		{"config.yaml.bak", "echo planted > %s", "config.yaml.bak owned by uid %d"},
		{"exports", "mkdir %s", "exports owned by uid %d"},
		{"api.sock", "ln -s " + target + " %s", "api.sock as a symbolic link"},
	} {
		t.Run("their "+tc.name+" at the top of root's store", func(t *testing.T) {
			c := c.with(t)
			root := filepath.Join(sticky, "store-planted-"+tc.name)
			c.mustRun("--root", root, "run", "--", "true")
			if err := os.Chmod(root, 0o777); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(root, tc.name)
			u.must(t, "sh", "-c", fmt.Sprintf(tc.plant, p))
			type seen struct {
				mode fs.FileMode
				uid  uint32
				size int64
				link string
			}
			look := func() (seen, error) {
				fi, err := os.Lstat(p)
				if err != nil {
					return seen{}, err
				}
				link, _ := os.Readlink(p)
				return seen{fi.Mode(), fi.Sys().(*syscall.Stat_t).Uid, fi.Size(), link}, nil
			}
			before, err := look()
			if err != nil {
				t.Fatal(err)
			}
			want := tc.refusal
			if strings.Contains(want, "%d") {
				want = fmt.Sprintf(want, u.uid)
			}
			for _, args := range [][]string{{"ps"}, {"run", "--", "true"}, {"gc"}, {"reap"}} {
				r := c.run(append([]string{"--root", root}, args...)...)
				if r.code != 123 || !strings.Contains(r.stderr, want) {
					t.Errorf("hostfork %s: exit %d: %s (want 123 and %q)", strings.Join(args, " "), r.code, r.stderr, want)
				}
			}
			if got, err := look(); err != nil || got != before {
				t.Errorf("their %s changed: %+v (%v), was %+v", tc.name, got, err, before)
			}
			trustSame(t, "the target of their symlink", target, beforeTarget)
		})
	}
	t.Run("their view of root's store", func(t *testing.T) {
		// What root made stays root's: the other user can't list, read or
		// write it.
		c := c.with(t)
		root := filepath.Join(sticky, "store")
		c.mustRun("--root", root, "ps")
		u.must(t, "ls", sticky)
		for _, argv := range [][]string{
			{"ls", root},
			{"cat", filepath.Join(root, "registry.sqlite")},
			{"touch", filepath.Join(root, "registry.sqlite")},
			{"touch", filepath.Join(root, "planted")},
		} {
			if out, code := u.run(t, argv[0], argv[1:]...); code == 0 {
				t.Errorf("as %s, %s succeeded: %s", u.name, strings.Join(argv, " "), out)
			}
		}
	})
}

// The store's shape: "/", a non-empty directory that isn't a store, and a
// zero-length registry beside run directories (a lost or truncated
// registry, which would otherwise be silently re-initialised) are refused
// and left as they are.
func TestTrustStoreShape(t *testing.T) {
	c := newCLI(t)
	t.Run("root directory", func(t *testing.T) {
		c := c.with(t)
		trustRefusal(t, c.run("--root", "/", "ps"), "/")
		if _, err := os.Lstat("/registry.sqlite"); err == nil {
			t.Errorf("/registry.sqlite exists")
		}
	})
	t.Run("not a store", func(t *testing.T) {
		c := c.with(t)
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		before := trustSnapshot(t, dir)
		for _, args := range [][]string{{"ps"}, {"run", "--", "true"}} {
			trustRefusal(t, c.run(append([]string{"--root", dir}, args...)...), dir)
		}
		if fi, err := os.Lstat(dir); err == nil && fi.Mode().Perm() != 0o755 {
			t.Errorf("hostfork refused %s as not a store, but first changed its mode from 0755 to %#o (think of --root /etc)", dir, fi.Mode().Perm())
		}
		trustSame(t, "a directory that is not a store", dir, before)
	})
	t.Run("zero-length registry beside run directories", func(t *testing.T) {
		c := c.with(t)
		c.mustRun("run", "--", "true")
		env := c.mustRun("run", "--detach", "--ttl", "2m", "--", "sleep", "300")
		id := firstLine(env.stdout)
		reg := filepath.Join(c.root, "registry.sqlite")
		for _, f := range []string{reg + "-wal", reg + "-shm"} {
			_ = os.Remove(f)
		}
		if err := os.Truncate(reg, 0); err != nil {
			t.Fatal(err)
		}
		for _, args := range [][]string{{"ps"}, {"run", "--", "true"}, {"gc"}, {"reap"}} {
			r := c.run(args...)
			trustRefusal(t, r, c.root)
			if !strings.Contains(r.stderr, "registry") {
				t.Errorf("the refusal does not say the registry is lost: %s", r.stderr)
			}
		}
		if fi, err := os.Stat(reg); err != nil || fi.Size() != 0 {
			t.Errorf("the truncated registry was re-initialised: %v %v", fi.Size(), err)
		}
		if _, err := os.Stat(filepath.Join(c.root, "runs", id)); err != nil {
			t.Errorf("the live environment's run directory: %v", err)
		}
	})
}

// trustModeViolations lists what in the store its group or others can
// access: the store, every directory (0700) and every file (0600) below
// it, except the contents of private trees (the workload's own files,
// with their own modes) and sockets.
func trustModeViolations(t *testing.T, root string) []string {
	t.Helper()
	var bad []string
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if parts := strings.Split(rel, "/"); parts[0] == "trees" && len(parts) >= 3 {
			if d.IsDir() {
				return filepath.SkipDir
			}
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSocket != 0 {
			return nil
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			bad = append(bad, rel+" is a symbolic link")
			return nil
		}
		if fi.Mode().Perm()&0o077 != 0 {
			bad = append(bad, fmt.Sprintf("%s %v", rel, fi.Mode()))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return bad
}

// The store and everything hostfork keeps in it are private to the
// store's owner — 0700 directories, 0600 files — after any command, also
// under umask 0; and a store whose files exist with looser modes (an older
// version, a careless chmod) is tightened by the next command.
func TestTrustStoreModes(t *testing.T) {
	c := newCLI(t)
	work := t.TempDir()
	src := filepath.Join(work, "src")
	tgt := filepath.Join(work, "target")
	for _, d := range []string{src, tgt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("f\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	old := syscall.Umask(0)
	r := c.run("run", "--purpose", "first", "--", "sh", "-c", "echo out; echo err >&2")
	syscall.Umask(old)
	if r.code != 0 {
		t.Fatalf("first run under umask 0: %v", r)
	}
	c.mustRun("run", "--detach", "--ttl", "2m", "--", "sleep", "300")
	env := firstLine(c.mustRun("create", "--tree", "w=copy:"+src, "--replace", tgt+"=w", "--ttl", "2m").stdout)
	c.mustRun("exec", env, "--", "true")
	c.mustRun("export", env, "w", "--to", filepath.Join(work, "exported"))
	c.mustRun("stop", "--all")
	c.mustRun("reap")
	c.mustRun("ps", "--all")
	if bad := trustModeViolations(t, c.root); len(bad) > 0 {
		t.Errorf("after these commands the store is not private: %s", strings.Join(bad, "; "))
	}

	t.Run("looser modes are tightened", func(t *testing.T) {
		c := c.with(t)
		_ = filepath.WalkDir(c.root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			rel, _ := filepath.Rel(c.root, p)
			if parts := strings.Split(rel, "/"); parts[0] == "trees" && len(parts) >= 3 {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			switch {
			case d.IsDir():
				_ = os.Chmod(p, 0o777)
			case d.Type().IsRegular():
				_ = os.Chmod(p, 0o666)
			}
			return nil
		})
		c.mustRun("ps")
		top, deep := []string{}, []string{}
		for _, b := range trustModeViolations(t, c.root) {
			if strings.Contains(strings.Fields(b)[0], "/") {
				deep = append(deep, b)
			} else {
				top = append(top, b)
			}
		}
		if len(top) > 0 {
			t.Errorf("the store's top level was not tightened: %s", strings.Join(top, "; "))
		}
		if len(deep) > 0 {
			t.Errorf("files below the store's top level keep their looser modes (only the top level is tightened; they are unreachable while runs/ and trees/ are 0700, but the rule is every file 0600): %s", strings.Join(deep, "; "))
		}
	})
}

// A registry edited (as by whoever could replace it) so that a run
// directory, a command directory or a tree names a root-only directory
// outside the store never makes gc, stop or reap delete, chmod or write
// it: the directory and its content survive byte for byte.
func TestTrustForgedRegistryPaths(t *testing.T) {
	testutil.RequireRoot(t)
	work := t.TempDir()
	src := filepath.Join(work, "src")
	tgt := filepath.Join(work, "target")
	for _, d := range []string{src, tgt} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(src, "f"), []byte("f\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	vault := t.TempDir()
	stopped := func(c *hostforkCLI, args ...string) string {
		c.t.Helper()
		id := firstLine(c.mustRun(args...).stdout)
		c.mustRun("stop", id)
		return id
	}
	gcAll := func(c *hostforkCLI, id string) {
		c.t.Helper()
		for _, args := range [][]string{
			{"gc", "--retain-trees", "0s", "--retain-evidence", "0s"},
			{"gc", "--force", id},
			{"reap"},
			{"gc", "--force", id},
		} {
			r := c.run(args...)
			c.t.Logf("hostfork %s: exit %d: %s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
	}

	t.Run("run directory", func(t *testing.T) {
		c := newCLI(t)
		v := trustVictim(t, vault, "run-dir")
		before := trustSnapshot(t, v)
		id := stopped(c, "create", "--ttl", "2m")
		dev, ino, _ := trustFileID(t, v)
		c.trustEditEnv(id, func(m map[string]any) { m["run_dir"] = v })
		// The ledger entry too, with the named directory's identity.
		c.exec(`update intents set target = ?, identity = ? where env_id = ? and kind = 'dir' and command_id = ''`,
			v, fmt.Sprintf(`{"dev":%d,"inode":%d,"path":%q}`, dev, ino, v), id)
		gcAll(c, id)
		trustSame(t, "gc and reap of a forged run directory", v, before)
	})

	t.Run("tree path", func(t *testing.T) {
		c := newCLI(t)
		v := trustVictim(t, vault, "tree-path")
		before := trustSnapshot(t, v)
		id := stopped(c, "create", "--tree", "w=copy:"+src, "--replace", tgt+"=w", "--ttl", "2m")
		c.trustEditEnv(id, func(m map[string]any) {
			tr := m["trees"].([]any)[0].(map[string]any)
			st := tr["storage"].(map[string]any)
			tr["host_path"] = filepath.Join(v, "tree")
			st["dest"], st["path"] = v, filepath.Join(v, "tree")
			st["copy"].(map[string]any)["dir"] = filepath.Join(v, "tree")
		})
		gcAll(c, id)
		trustSame(t, "gc of a tree whose path was forged", v, before)
	})

	t.Run("tree path and identity", func(t *testing.T) {
		// The forger also records the named directory's identity, which
		// anyone who can stat it learns; the parts inside it (which they
		// can't see) keep their recorded identities.
		c := newCLI(t)
		v := trustVictim(t, vault, "tree-identity")
		before := trustSnapshot(t, v)
		id := stopped(c, "create", "--tree", "w=copy:"+src, "--replace", tgt+"=w", "--ttl", "2m")
		dev, ino, fsid := trustFileID(t, v)
		c.trustEditEnv(id, func(m map[string]any) {
			tr := m["trees"].([]any)[0].(map[string]any)
			st := tr["storage"].(map[string]any)
			tr["host_path"] = filepath.Join(v, "tree")
			st["dest"], st["path"] = v, filepath.Join(v, "tree")
			st["dest_id"] = map[string]any{"dev": dev, "ino": ino, "fsid": json.Number(strconv.FormatUint(fsid, 10))}
			st["copy"].(map[string]any)["dir"] = filepath.Join(v, "tree")
		})
		gcAll(c, id)
		trustSame(t, "gc of a tree whose path and destination identity were forged", v, before)
	})

	t.Run("stop and reap of a live environment", func(t *testing.T) {
		c := newCLI(t)
		vr := trustVictim(t, vault, "live-run-dir")
		vc := trustVictim(t, vault, "live-command-dir")
		beforeR, beforeC := trustSnapshot(t, vr), trustSnapshot(t, vc)
		id := firstLine(c.mustRun("run", "--detach", "--ttl", "2m", "--", "sleep", "300").stdout)
		var cmd string
		eventually(t, "the command runs", func() string {
			for _, r := range c.trustPS() {
				if r["env"] == id && r["state"] == "alive" {
					cmd = r["id"].(string)
					return ""
				}
			}
			return "not yet"
		})
		c.trustEditEnv(id, func(m map[string]any) { m["run_dir"] = vr })
		c.exec("update commands set dir = ? where id = ?", vc, cmd)
		r := c.run("stop", id)
		t.Logf("stop: %v", r)
		c.run("reap")
		trustSame(t, "stop and reap of an environment whose run directory was forged", vr, beforeR)
		trustSame(t, "stop and reap of a command whose directory was forged", vc, beforeC)
		gcAll(c, id)
		trustSame(t, "gc of an environment whose run directory was forged", vr, beforeR)
		trustSame(t, "gc of a command whose directory was forged", vc, beforeC)
	})

	t.Run("cgroup intents outside a cgroup filesystem", func(t *testing.T) {
		// Pending cgroup intents (v2 and v1) naming empty root-only
		// directories, which an rmdir would remove: only a directory on a
		// cgroup filesystem is ever removed as a cgroup.
		c := newCLI(t)
		id := stopped(c, "create", "--ttl", "2m")
		var victims []string
		for _, kind := range []string{"cgroup", "cgroup-v1"} {
			v := filepath.Join(vault, "empty-"+kind)
			if err := os.Mkdir(v, 0o700); err != nil {
				t.Fatal(err)
			}
			victims = append(victims, v)
			c.forgeIntent(id, kind, v)
		}
		for _, args := range [][]string{{"reap"}, {"gc", "--force", id}, {"reap"}, {"stop", id}} {
			r := c.run(args...)
			t.Logf("hostfork %s: exit %d: %s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
		for _, v := range victims {
			if fi, err := os.Lstat(v); err != nil || !fi.IsDir() {
				t.Errorf("the empty directory %s named by a forged cgroup intent: %v", v, err)
			}
		}
	})

	t.Run("unrecorded tree intent", func(t *testing.T) {
		// A pending tree in the ledger (an interrupted allocation) naming a
		// root-only directory outside every allocation area.
		c := newCLI(t)
		v := trustVictim(t, vault, "intent")
		before := trustSnapshot(t, v)
		id := stopped(c, "create", "--ttl", "2m")
		c.forgeIntent(id, "tree", v)
		for _, args := range [][]string{{"reap"}, {"gc", "--force", id}, {"reap"}} {
			r := c.run(args...)
			t.Logf("hostfork %s: exit %d: %s%s", strings.Join(args, " "), r.code, r.stdout, r.stderr)
		}
		trustSame(t, "reap of a forged unrecorded tree", v, before)
	})
}

// ---------------------------------------------------------------------------
// Class 3: secrets.

// An explicit --env value is not in manifest.json, ps, status or envs
// (human or JSON) unless --show-env asks for it; the registry and the store
// are the owner's alone, so the other user can't read it there either.
func TestTrustSecretsStayPrivate(t *testing.T) {
	c := newCLI(t)
	u := newTrustUser(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	secret := "s3cret-" + hex.EncodeToString(b)
	seen := filepath.Join(t.TempDir(), "seen")
	env := firstLine(c.mustRun("run", "--env", "API_TOKEN="+secret, "--detach", "--ttl", "2m", "--purpose", "secret test",
		"--", "sh", "-c", `printf %s "$API_TOKEN" > "$0"; exec sleep 300`, seen).stdout)
	if got := waitFile(t, seen); got != secret {
		t.Fatalf("the workload got API_TOKEN=%q", got)
	}
	var cmd string
	for _, r := range c.trustPS() {
		if r["env"] == env {
			cmd, _ = r["id"].(string)
		}
	}
	if cmd == "" {
		t.Fatal("no command in ps --json")
	}
	for _, args := range [][]string{
		{"ps"}, {"ps", "--json"}, {"ps", "--all"}, {"ps", "--all", "--json"},
		{"status", env}, {"status", "--json", env}, {"status", cmd}, {"status", "--json", cmd},
		{"envs"}, {"envs", "--json"}, {"envs", "--all", "--json"},
		{"events"}, {"events", "--json"},
	} {
		r := c.mustRun(args...)
		if strings.Contains(r.stdout+r.stderr, secret) {
			t.Errorf("hostfork %s shows the secret: %s", strings.Join(args, " "), r.stdout)
		}
	}
	// Asked for, the value is shown: it is recorded (in the environment's
	// spec, in the registry).
	if r := c.mustRun("envs", "--json", "--show-env"); !strings.Contains(r.stdout, secret) {
		t.Errorf("envs --json --show-env does not show the value it was asked for: %s", r.stdout)
	}
	// (A command's JSON record names its variables, env_keys; their values
	// are in its environment's record, shown above.)
	for _, args := range [][]string{{"status", "--json", "--show-env", env}, {"status", "--show-env", env}, {"status", "--show-env", cmd}} {
		if r := c.mustRun(args...); !strings.Contains(r.stdout, secret) {
			t.Errorf("hostfork %s does not show the value though the registry keeps it (envs --json --show-env prints it)%s:\n%s",
				strings.Join(args, " "), map[bool]string{true: ", and says the values are not recorded", false: ""}[strings.Contains(r.stdout, "values not recorded")], trustLinesWith(r.stdout, "API_TOKEN"))
		}
	}
	// No file hostfork writes for the run holds it: manifest.json (written
	// when the environment stops) first.
	c.mustRun("stop", env)
	manifest := filepath.Join(c.root, "runs", env, "manifest.json")
	if b, err := os.ReadFile(manifest); err != nil || bytes.Contains(b, []byte(secret)) {
		t.Errorf("manifest.json (%v) holds the secret", err)
	}
	_ = filepath.WalkDir(filepath.Join(c.root, "runs"), func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.Type().IsRegular() {
			if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(secret)) {
				t.Errorf("%s holds the secret", p)
			}
		}
		return nil
	})
	// The registry holds it, for the owner only.
	for _, p := range []string{c.root, filepath.Join(c.root, "registry.sqlite")} {
		fi, err := os.Lstat(p)
		if err != nil || fi.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s is %v (%v), want 0700/0600", p, fi.Mode(), err)
		}
	}
	// The test's store is in a root-only temporary directory: put the
	// store where the other user can reach it, and they still can't read
	// it.
	for p := filepath.Dir(c.root); p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := hostforkForUser(t)
	for _, argv := range [][]string{
		{"cat", filepath.Join(c.root, "registry.sqlite")},
		{"cat", manifest},
		{"ls", filepath.Join(c.root, "runs")},
		{"grep", "-r", secret, c.root},
		{bin, "--root", c.root, "status", "--show-env", env},
		{bin, "--root", c.root, "envs", "--json", "--show-env"},
	} {
		out, code := u.run(t, argv[0], argv[1:]...)
		if code == 0 || strings.Contains(out, secret) {
			t.Errorf("as %s, %s: exit %d: %s", u.name, strings.Join(argv, " "), code, out)
		}
	}
}

// ---------------------------------------------------------------------------
// Class 4: terminal injection.

// trustControlIn lists the raw control characters (other than newline and tab)
// and invalid UTF-8 in s, and lines that a value could have faked.
func trustControlIn(s string) []string {
	var bad []string
	for i, r := range s {
		switch {
		case r == '\n' || r == '\t':
		case r == utf8.RuneError:
			bad = append(bad, fmt.Sprintf("invalid UTF-8 at byte %d", i))
		case r < 0x20 || r == 0x7f || r >= 0x80 && r <= 0x9f || r == 0x2028 || r == 0x2029:
			bad = append(bad, fmt.Sprintf("%q at byte %d", r, i))
		}
	}
	for _, l := range regexp.MustCompile(`(?m)^\s*FAKE\S*.*$`).FindAllString(s, -1) {
		bad = append(bad, "faked line "+strconv.Quote(l))
	}
	return bad
}

// A purpose, an argv element and label values holding newline, CR, ESC,
// BEL, a C1 control and (through a spec file, where the OS allows it) NUL
// are escaped in every human-readable output — ps, status, envs, events,
// the error of a program that can't be found — so they can neither fake
// rows nor send escape sequences; the JSON output keeps them exactly.
func TestTrustTerminalInjection(t *testing.T) {
	c := newCLI(t)
	purpose := "why\nFAKE1 0000000000 alive\r\x1b[2J\x1b]0;title\x07\u009b31m"
	label := "v\x1b[5m\nFAKE2 label\r"
	argv := []string{"sh", "-c", "exec sleep 300 # \x1b[31m\nFAKE3 argv", "x\rFAKE4\x1b[K"}
	env := firstLine(c.mustRun(append([]string{"run", "--detach", "--ttl", "2m", "--purpose", purpose, "--label", "k=" + label, "--"}, argv...)...).stdout)
	var cmd string
	eventually(t, "the command is listed", func() string {
		for _, r := range c.trustPS() {
			if r["env"] == env {
				cmd, _ = r["id"].(string)
				return ""
			}
		}
		return "not yet"
	})
	// NUL can't be in argv, but a spec file can hold one.
	specFile := filepath.Join(t.TempDir(), "spec.json")
	if err := os.WriteFile(specFile, []byte(`{"purpose": "nul\u0000FAKE5\u001b[1m", "labels": {"n": "a\u0000b\nFAKE6"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	nulEnv := ""
	if r := c.run("create", "--spec", specFile, "--ttl", "2m"); r.code == 0 {
		nulEnv = firstLine(r.stdout)
		c.mustRun("exec", nulEnv, "--detach", "--purpose", "p\x1b[1mq\nFAKE8", "--", "sleep", "300")
	} else {
		t.Logf("a spec with NUL is refused: %v", r)
		if bad := trustControlIn(r.stderr); len(bad) > 0 {
			t.Errorf("the refusal prints raw control characters: %s: %q", strings.Join(bad, ", "), r.stderr)
		}
	}

	outputs := [][]string{
		{"ps"}, {"ps", "--all"}, {"status", env}, {"status", cmd}, {"envs"}, {"envs", "--all"}, {"events"},
	}
	if nulEnv != "" {
		outputs = append(outputs, []string{"status", nulEnv})
	}
	for _, args := range outputs {
		r := c.mustRun(args...)
		if bad := trustControlIn(r.stdout + r.stderr); len(bad) > 0 {
			t.Errorf("hostfork %s prints raw control characters: %s\n%q", strings.Join(args, " "), strings.Join(bad, ", "), r.stdout)
		}
	}
	if r := c.mustRun("status", cmd); !strings.Contains(r.stdout, `\x1b`) || !strings.Contains(r.stdout, `\n`) {
		t.Errorf("status does not show the escaped values: %s", r.stdout)
	}
	r := c.run("run", "--", "\x1b[2Jno-such-program\nFAKE7")
	if r.code != 127 {
		t.Errorf("want 127 for a program that does not exist: %v", r)
	}
	if bad := trustControlIn(r.stdout + r.stderr); len(bad) > 0 {
		t.Errorf("the error prints raw control characters: %s: %q", strings.Join(bad, ", "), r.stderr)
	}

	// JSON keeps every value exactly.
	st := c.trustCommand(cmd)
	if st["purpose"] != purpose {
		t.Errorf("status --json purpose %q, want %q", st["purpose"], purpose)
	}
	if got, _ := json.Marshal(st["argv"]); string(got) != string(trustMust(json.Marshal(argv))) {
		t.Errorf("status --json argv %s, want %q", got, argv)
	}
	if trustField(st, "labels", "k") != label {
		t.Errorf("status --json labels %v, want k=%q", st["labels"], label)
	}
	for _, row := range c.trustPS() {
		if row["id"] == cmd && (row["purpose"] != purpose || trustField(row, "labels", "k") != label) {
			t.Errorf("ps --json row %v", row)
		}
	}
	if nulEnv != "" {
		if e := c.trustJSON("status", "--json", nulEnv); trustField(e, "purpose") != "nul\x00FAKE5\x1b[1m" || trustField(e, "labels", "n") != "a\x00b\nFAKE6" {
			t.Errorf("status --json of the spec's environment: purpose %q labels %v", trustField(e, "purpose"), trustField(e, "labels"))
		}
	}
	sc := bufio.NewScanner(strings.NewReader(c.mustRun("events", "--json").stdout))
	for sc.Scan() {
		var v any
		if err := json.Unmarshal(sc.Bytes(), &v); err != nil {
			t.Errorf("events --json line is not JSON: %q", sc.Text())
		}
	}
}

// trustLinesWith returns the lines of s that contain sub.
func trustLinesWith(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

func trustMust(b []byte, err error) []byte {
	if err != nil {
		panic(err)
	}
	return b
}

// ---------------------------------------------------------------------------
// Class 6: a forged receipt.

// trustForgeReceipt returns receipt content claiming that the leader exited 0
// and the whole tree is gone, keeping the fields that bind it to its
// command and proof file, padded to at least n bytes.
func trustForgeReceipt(t *testing.T, orig []byte, n int) []byte {
	t.Helper()
	if _, err := supervise.ParseReceipt(orig); err != nil {
		t.Fatalf("receipt: %v: %q", err, orig)
	}
	var lines []string
	for _, l := range strings.Split(strings.TrimRight(string(orig), " \n\x00"), "\n") {
		switch k, _, _ := strings.Cut(l, "="); k {
		case "leader_exited_at", "exit_code", "tree_exited_at", "complete", "stop_reason", "end":
		default:
			lines = append(lines, l)
		}
	}
	now := strconv.FormatInt(time.Now().UnixNano(), 10)
	lines = append(lines, "leader_exited_at="+now, "exit_code=0", "tree_exited_at="+now, "complete=true", "stop_reason=completed")
	text := strings.Join(lines, "\n") + "\n"
	h := fnv.New32a()
	h.Write([]byte(text))
	b := []byte(fmt.Sprintf("%send=%08x\n", text, h.Sum32()))
	if r, err := supervise.ParseReceipt(b); err != nil || !r.Complete || r.ExitCode == nil {
		t.Fatalf("the forgery does not read as a receipt: %+v, %v", r, err)
	}
	if len(b) < n {
		b = append(b, bytes.Repeat([]byte(" "), n-len(b))...)
	}
	return b
}

// In the subreaper tier, where the guardian's receipt is the tree's only
// witness, a receipt claiming that the leader exited 0 and the tree is
// gone is not believed while its guardian lives — rewritten in place (the
// same inode, so it still verifies), swapped by rename, or swapped back and
// forth with the registered one while ps and status read it: they show the
// command alive and not exited(0), stop still stops it (a receipt that no
// longer verifies may instead make stop refuse, but never report success
// while the workload runs), and the final record says how the leader
// really ended, not exited(0) as the forgery claimed.
func TestTrustForgedReceipt(t *testing.T) {
	for _, how := range []string{"in place", "by rename", "swapped back and forth"} {
		t.Run(how, func(t *testing.T) {
			c := newCLI(t)
			pidFile := filepath.Join(t.TempDir(), "leader.pid")
			env := firstLine(c.mustRun("run", "--tier", "subreaper", "--detach", "--ttl", "2m", "--",
				"sh", "-c", `echo $$ > "$0"; exec sleep 300`, pidFile).stdout)
			pid := waitPID(t, pidFile)
			st := startTime(pid)
			var cmd, dir string
			eventually(t, "the command is alive", func() string {
				for _, r := range c.trustPS() {
					if r["env"] == env && r["state"] == "alive" {
						cmd, _ = r["id"].(string)
						dir, _ = r["dir"].(string)
						return ""
					}
				}
				return "not yet"
			})
			receipt := filepath.Join(dir, "receipt")
			var orig []byte
			eventually(t, "the guardian writes its receipt", func() string {
				orig, _ = os.ReadFile(receipt)
				if r, err := supervise.ParseReceipt(orig); err != nil || r.WorkloadPID == 0 {
					return "no workload in the receipt yet"
				}
				return ""
			})
			forged := trustForgeReceipt(t, orig, len(orig))
			if len(forged) > len(orig) {
				t.Logf("the forged receipt (%d bytes) is longer than the guardian's (%d)", len(forged), len(orig))
			}
			var before unix.Stat_t
			if err := unix.Stat(receipt, &before); err != nil {
				t.Fatal(err)
			}
			rounds := 1
			var stopSwapping func() int
			switch how {
			case "in place":
				f, err := os.OpenFile(receipt, os.O_WRONLY, 0)
				if err != nil {
					t.Fatal(err)
				}
				if _, err := f.WriteAt(forged, 0); err != nil {
					t.Fatal(err)
				}
				f.Close()
				var now unix.Stat_t
				if err := unix.Stat(receipt, &now); err != nil || now.Ino != before.Ino {
					t.Fatalf("the receipt is no longer the same inode: %v", err)
				}
			case "by rename":
				tmp := receipt + ".forged"
				if err := os.WriteFile(tmp, forged, 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Rename(tmp, receipt); err != nil {
					t.Fatal(err)
				}
			case "swapped back and forth":
				// The receipt's name alternates between the registered inode
				// and a forged one as fast as renames go: a reader that checks
				// the inode by path and then reads by path again would take
				// the forgery for the receipt.
				rounds = 25
				stopSwapping = trustSwapReceipt(t, receipt, forged)
			}
			if !sameProcessAlive(pid, st) {
				t.Fatal("the leader died by itself")
			}
			for round := 0; round < rounds; round++ {
				trustCheckAlive(t, c, cmd, pid, st)
			}
			if stopSwapping != nil {
				t.Logf("the receipt was swapped %d times while ps and status read it", stopSwapping())
			}

			r := c.run("stop", env)
			gone := !sameProcessAlive(pid, st)
			switch {
			case r.code == 0 && !gone:
				t.Errorf("stop exited 0 but the workload (pid %d) runs on: %v", pid, r)
			case !gone && how == "by rename":
				t.Logf("stop refused a tree whose receipt no longer verifies: %v", r)
			case !gone:
				t.Errorf("stop did not stop the workload: %v", r)
			}
			rec := c.trustCommand(cmd)
			if code, _ := rec["exit_code"].(float64); rec["exit_code"] != nil && code == 0 && rec["signal"] == nil {
				t.Errorf("the final record says exited(0) as the forgery claimed (the leader was stopped by hostfork): state %v, leader %v, signal %v, stop reason %v, stopped by hostfork %v",
					rec["record_state"], rec["leader_state"], rec["signal"], rec["stop_reason"], rec["stopped_by_hostfork"])
			}
			// The stop reason is the one exception: the receipt carries the
			// first reason the guardian was given (a deadline, an owner exit
			// in C), and that reason wins over a later stopper's (issue 10,
			// class 11), so a forged reason in a live receipt is taken
			// too. It names why, never whether: liveness and exit status
			// are checked above against the kernel.
			t.Logf("final stop reason %v", rec["stop_reason"])
		})
	}
}

// trustSwapReceipt alternates the name receipt between its registered
// inode and a file holding forged until the returned function is called;
// that function puts the registered inode back and returns how many swaps
// were made.
func trustSwapReceipt(t *testing.T, receipt string, forged []byte) func() int {
	t.Helper()
	origLink, forgedLink, next := receipt+".orig", receipt+".forged", receipt+".next"
	if err := os.Link(receipt, origLink); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(forgedLink, forged, 0o600); err != nil {
		t.Fatal(err)
	}
	stop, count := make(chan struct{}), make(chan int, 1)
	go func() {
		n := 0
		for {
			select {
			case <-stop:
				_ = os.Remove(next)
				if os.Link(origLink, next) == nil {
					_ = os.Rename(next, receipt)
				}
				count <- n
				return
			default:
			}
			for _, from := range []string{forgedLink, origLink} {
				_ = os.Remove(next)
				if os.Link(from, next) == nil && os.Rename(next, receipt) == nil {
					n++
				}
			}
		}
	}()
	stopped := false
	n := 0
	halt := func() int {
		if !stopped {
			stopped = true
			close(stop)
			n = <-count
		}
		return n
	}
	t.Cleanup(func() { halt() })
	return halt
}

// trustCheckAlive checks, while the leader pid (start time st) runs, that
// ps and status show command cmd alive and not exited(0).
func trustCheckAlive(t *testing.T, c *hostforkCLI, cmd string, pid int, st uint64) {
	t.Helper()
	for _, args := range [][]string{{"ps"}, {"ps", "--all"}} {
		r := c.mustRun(args...)
		if !strings.Contains(r.stdout, "alive") || strings.Contains(r.stdout, "exited(0)") {
			t.Errorf("hostfork %s while the leader runs:\n%s", strings.Join(args, " "), r.stdout)
		}
	}
	for _, row := range c.trustPS() {
		if row["id"] == cmd && (row["state"] != "alive" || row["record_state"] == "exited") {
			t.Errorf("ps --json: state %v, record %v while the workload runs", row["state"], row["record_state"])
		}
	}
	rec := c.trustCommand(cmd)
	if sameProcessAlive(pid, st) && (rec["leader_state"] == "exited" || rec["exit_code"] != nil) {
		t.Errorf("status --json: leader %v, exit_code %v (from the forged receipt) while the leader (pid %d) runs", rec["leader_state"], rec["exit_code"], pid)
	}
	if r := c.mustRun("status", cmd); strings.Contains(r.stdout, "exited (0)") {
		t.Errorf("status shows the forged exit while the leader runs:\n%s", r.stdout)
	}
}

// ---------------------------------------------------------------------------
// Class 13: host mounts pinned by environments.

// trustMountLine returns the /proc/PID/mountinfo line whose mount point is
// target ("" if there is none).
func trustMountLine(pid int, target string) string {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/mountinfo")
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) > 4 && f[4] == target {
			return l
		}
	}
	return ""
}

// trustKeeper is the PID of environment env's keeper.
func (c *hostforkCLI) trustKeeper(env string) int {
	c.t.Helper()
	p, _ := trustField(c.trustJSON("status", "--json", env), "keeper", "pid").(float64)
	if p == 0 {
		c.t.Fatalf("environment %s has no keeper", env)
	}
	return int(p)
}

// trustCheckSlaveView checks that the view of keeper sees host mount changes
// below shared, which the host makes with mount and umount (run in the
// host's namespace): the view's copy of shared is a slave, a new mount
// below it reaches the view (and a command in the environment reads it),
// and its unmount on the host leaves the view too.
//
// parentShared says whether the mount holding shared is itself shared: the
// kernel propagates a mount's own unmount from its parent's peer group, so
// under a private parent only what happens below shared reaches the view.
func trustCheckSlaveView(t *testing.T, c *hostforkCLI, env string, keeper int, shared string, parentShared bool, host func(args ...string)) {
	t.Helper()
	if l := trustMountLine(keeper, shared); !strings.Contains(l, "master:") {
		t.Errorf("the view's copy of the shared host mount %s is not a slave (no master: tag), so host unmounts and new mounts don't reach it: %q", shared, l)
	}
	sub := filepath.Join(shared, "sub")
	host("mkdir", "-p", sub)
	host("mount", "-t", "tmpfs", "-o", "size=1m", "hf-trust-sub", sub)
	host("sh", "-c", `echo from-the-host > "$0/marker"`, sub)
	reached := false
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		if trustMountLine(keeper, sub) != "" {
			reached = true
			break
		}
	}
	if !reached {
		t.Errorf("a mount the host made at %s after the environment was created does not reach its view", sub)
	} else if r := c.run("exec", env, "--", "cat", filepath.Join(sub, "marker")); r.stdout != "from-the-host\n" {
		t.Errorf("a command in the environment does not see the host's new mount: %v", r)
	}
	host("umount", sub)
	gone := func(p string) bool {
		for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			if trustMountLine(keeper, p) == "" {
				return true
			}
		}
		return false
	}
	if !gone(sub) {
		t.Errorf("the host unmounted %s, but the environment's view still holds it (the filesystem stays busy): %q", sub, trustMountLine(keeper, sub))
	}
	host("umount", shared)
	if parentShared && !gone(shared) {
		t.Errorf("the host unmounted %s, but the environment's view still holds it (the filesystem stays busy): %q", shared, trustMountLine(keeper, shared))
	}
}

// Where the host's mounts are shared, a view is their slave: a host
// unmount, or a new mount, below a shared mount reaches the view (as
// Docker's rslave), so an environment never pins a filesystem the host
// unmounted. Checked with a shared tmpfs of the test's own under this
// host's private "/", and with "/" itself shared (in a mount namespace of
// the test's, so that the host's other mounts are untouched). Where the
// host's mounts are private, doctor says what that means and how to
// change it.
func TestTrustHostMountPropagation(t *testing.T) {
	c := newCLI(t)
	rootShared := strings.Contains(trustMountLine(os.Getpid(), "/"), "shared:")

	t.Run("shared mount under a private root", func(t *testing.T) {
		c := c.with(t)
		base := t.TempDir()
		shared := filepath.Join(base, "shared")
		scratch := filepath.Join(base, "scratch")
		for _, d := range []string{shared, scratch} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := unix.Mount("hf-trust-shared", shared, "tmpfs", 0, "size=1m"); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = unix.Unmount(filepath.Join(shared, "sub"), unix.MNT_DETACH)
			_ = unix.Unmount(shared, unix.MNT_DETACH)
		})
		if err := unix.Mount("", shared, "", unix.MS_SHARED, ""); err != nil {
			t.Fatal(err)
		}
		env := firstLine(c.mustRun("create", "--scratch", scratch, "--ttl", "2m").stdout)
		t.Cleanup(func() { c.run("stop", env) })
		host := func(args ...string) {
			t.Helper()
			if out, err := exec.Command(args[0], args[1:]...).CombinedOutput(); err != nil {
				t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
			}
		}
		trustCheckSlaveView(t, c, env, c.trustKeeper(env), shared, rootShared, host)
	})

	t.Run("shared root", func(t *testing.T) {
		c := c.with(t)
		for _, tool := range []string{"unshare", "nsenter"} {
			if _, err := exec.LookPath(tool); err != nil {
				testutil.Skip(t, tool+" is not installed")
			}
		}
		// A mount namespace whose "/" is shared stands in for such a host.
		holder := exec.Command("unshare", "-m", "--propagation", "shared", "sleep", "600")
		if err := holder.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = holder.Process.Kill(); _ = holder.Wait() })
		ns := strconv.Itoa(holder.Process.Pid)
		eventually(t, "the namespace is made", func() string {
			if strings.Contains(trustMountLine(holder.Process.Pid, "/"), "shared:") {
				if a, _ := os.Readlink("/proc/" + ns + "/ns/mnt"); a != "" {
					if b, _ := os.Readlink("/proc/self/ns/mnt"); a != b {
						return ""
					}
				}
			}
			return "not yet"
		})
		bin := hostforkForUser(t)
		inNS := func(args ...string) *exec.Cmd {
			return exec.Command("nsenter", append([]string{"-t", ns, "-m", "--"}, args...)...)
		}
		host := func(args ...string) {
			t.Helper()
			if out, err := inNS(args...).CombinedOutput(); err != nil {
				t.Fatalf("%s: %v: %s", strings.Join(args, " "), err, out)
			}
		}
		base := t.TempDir()
		shared := filepath.Join(base, "shared")
		scratch := filepath.Join(base, "scratch")
		for _, d := range []string{shared, scratch} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		host("mount", "-t", "tmpfs", "-o", "size=1m", "hf-trust-shared", shared)
		hf := func(args ...string) cliResult {
			t.Helper()
			cmd := inNS(append([]string{bin}, args...)...)
			cmd.Env = c.command().Env
			var out, errb bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &errb
			r := cliResult{}
			if err := cmd.Run(); err != nil {
				var ee *exec.ExitError
				if !errors.As(err, &ee) {
					t.Fatal(err)
				}
				r.code = ee.ExitCode()
			}
			r.stdout, r.stderr = out.String(), errb.String()
			return r
		}
		// A view is a recursive slave everywhere (private mounts stay
		// private in it).
		if p := trustField(c.trustJSON("plan", "--scratch", scratch, "--json"), "propagation"); p != "slave" {
			t.Errorf("plan says propagation %v, want slave", p)
		}
		if r := hf("plan", "--scratch", scratch, "--json"); !strings.Contains(r.stdout, `"propagation": "slave"`) {
			t.Errorf("under a shared /, plan does not choose a slave view: %v", r)
		}
		r := hf("create", "--scratch", scratch, "--ttl", "2m")
		if r.code != 0 {
			t.Fatalf("create: %v", r)
		}
		env := firstLine(r.stdout)
		t.Cleanup(func() { c.run("stop", env) })
		trustCheckSlaveView(t, c, env, c.trustKeeper(env), shared, true, host)
	})

	t.Run("private root: doctor explains", func(t *testing.T) {
		c := c.with(t)
		if rootShared {
			t.Skip("this host's / is shared: there is nothing to explain")
		}
		rep := c.trustJSON("doctor", "--json")
		checks, _ := trustField(rep, "checks").([]any)
		text := ""
		for _, ch := range checks {
			if trustField(ch, "id") == "namespaces.mount" {
				for _, k := range []string{"detail", "missing", "remedy"} {
					if s, ok := trustField(ch, k).(string); ok {
						text += s + "\n"
					}
				}
			}
		}
		if text == "" {
			t.Fatalf("doctor has no namespaces.mount check: %v", checks)
		}
		if !strings.Contains(text, "private") {
			t.Errorf("doctor does not say the host's mounts are private: %s", text)
		}
		if !regexp.MustCompile(`(?i)busy|pinn|unmount|not seen|never see|don't reach|does not reach|do not reach`).MatchString(text) {
			t.Errorf("doctor does not say what private propagation means for environments (host unmounts and new mounts don't reach a view; a view keeps an unmounted filesystem busy): %s", text)
		}
		if !regexp.MustCompile(`make-r?shared`).MatchString(text) {
			t.Errorf("doctor does not say how to change it (e.g. mount --make-rshared /): %s", text)
		}
	})
}
