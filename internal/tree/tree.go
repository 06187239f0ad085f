// Package tree owns process-tree membership: hostfork's one mechanism for
// stopping a process tree (DESIGN.md, "Stop"), and the sampling of a
// workload tree's memory that admission decides from (Sampler, in
// sample.go; internal/admit gets the samples and stays pure). A sample's
// PID tree is found by the same walk as a stop's (descendantsOf).
//
// Every stop of a command tree, of an environment's leftovers and of a
// keeper-less environment's commands goes through Stop; the C helpers
// (internal/supervise, hf_tree.c) follow the same rules for the guardian's
// deadline, timeout, idle and owner-exit stops and the keeper's, whose
// roots are always subreapers. One table of cases (supervise's
// tree_table_test.go) runs against both. The rules:
//
//   - membership is the whole cgroup2 subtree of the target, nested groups
//     included, and every live descendant of its roots (a command's
//     guardian is its subreaper, so a process that moved itself out of the
//     cgroup is still a member while the guardian lives), and the leaders
//     that are still the recorded processes; the roots are not members;
//   - every signal goes through a pidfd opened first and then re-checked
//     for membership, so a PID reused after an exit, or a process that is
//     not provably a member, is never signalled;
//   - SIGTERM first, then, after the grace, the kill: a tree with a cgroup
//     and subreaper roots (or none) starts with cgroup.kill (atomic
//     against forks), with no listing before it and nothing frozen; the
//     members left outside the cgroup are stopped (SIGSTOP) until two
//     listings agree, and killed. A tree with leaders, or roots that are
//     not subreapers, can lose an orphan to init if its parent dies
//     first: it is quiesced instead (cgroup.freeze, and SIGSTOP for
//     members outside the cgroup), listed until two listings agree,
//     killed (cgroup.kill and every member through its pidfd), and only
//     what this stop froze is thawed;
//   - the stop is verified: Go reports the members that survive; a
//     guardian repeats the kill until waitpid says ECHILD.
//
// Only the engine imports it.
package tree

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/linux"
)

// ErrSurvivors reports members that a stop could not end.
var ErrSurvivors = fmt.Errorf("the tree did not end: %w", api.ErrUnverified)

// Target names one tree.
type Target struct {
	// Cgroup is the cgroup2 group whose subtree's processes are members
	// ("" in the subreaper tier); Mount is the cgroup2 mount it is under.
	Cgroup string
	Mount  string
	// Roots are processes whose live descendants are members; the roots
	// themselves are not. Each is checked against its identity before its
	// descendants are looked for.
	Roots []linux.Identity
	// Leaders are processes that belong to the tree themselves, with
	// their live descendants: a command's leader when no guardian is left
	// to be its root (issue 39, item 8). Each is a member only while it is
	// the recorded process (boot id, PID, start time), re-checked through
	// a pidfd like every member.
	Leaders []linux.Identity
	// Subreapers says that every root is its descendants' subreaper, as
	// hostfork's guardians are: a process orphaned by the kill is handed
	// to a root and so is still found from the roots down afterwards. Only
	// then does a kill with a cgroup skip the listing before cgroup.kill.
	Subreapers bool
}

// Result is what one stop did and found.
type Result struct {
	Signalled int  // members that got SIGTERM
	Killed    int  // members that got SIGKILL
	Froze     bool // this stop froze the cgroup (and thawed it)
	Stable    bool // membership was stable when the tree was killed
	// Outsiders counts members found outside the cgroup (descendants of a
	// root that moved themselves out).
	Outsiders int
	// Survivors are members still alive after the kill and its
	// verification.
	Survivors []linux.Identity
}

// roots returns the PIDs of the roots and leaders that are still the
// recorded processes: the processes whose descendants are members.
func (t Target) roots() []int {
	var out []int
	for _, r := range append(slices.Clip(t.Roots), t.Leaders...) {
		if linux.Assess(r) == linux.Alive {
			out = append(out, r.PID)
		}
	}
	return out
}

// isLeader reports whether pid is one of the target's leaders now.
func (t Target) isLeader(pid int) bool {
	return slices.ContainsFunc(t.Leaders, func(l linux.Identity) bool { return l.PID == pid && linux.Assess(l) == linux.Alive })
}

// rel is the cgroup relative to its mount ("/hostfork/e/commands/c").
func (t Target) rel() string {
	if t.Cgroup == "" || t.Mount == "" {
		return ""
	}
	r, ok := strings.CutPrefix(filepath.Clean(t.Cgroup), filepath.Clean(t.Mount))
	if !ok || (r != "" && r[0] != '/') {
		return ""
	}
	return r
}

// inCgroup reports whether pid's cgroup2 group is the target's or below it.
func (t Target) inCgroup(pid int) bool {
	want := t.rel()
	if want == "" {
		return false
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		return false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if cur, ok := strings.CutPrefix(line, "0::"); ok {
			cur = strings.TrimSpace(cur)
			return cur == want || strings.HasPrefix(cur, want+"/")
		}
	}
	return false
}

// InGroup reports whether pid's cgroup2 group is group or below it (group
// under the cgroup2 mount mount).
func InGroup(pid int, mount, group string) bool {
	return Target{Cgroup: group, Mount: mount}.inCgroup(pid)
}

// descendant re-reads pid's ancestry now.
func descendant(pid int, roots []int) bool {
	for n := 0; n < 4096 && pid > 1; n++ {
		st, err := linux.ReadStat(pid)
		if err != nil {
			return false
		}
		if slices.Contains(roots, st.PPID) {
			return true
		}
		pid = st.PPID
	}
	return false
}

// member reports whether pid belongs to the tree now.
func (t Target) member(pid int, roots []int) bool {
	if slices.Contains(roots, pid) {
		return t.isLeader(pid)
	}
	return t.inCgroup(pid) || (len(roots) > 0 && descendant(pid, roots))
}

// Members lists the tree's members now, sorted.
func Members(t Target) ([]int, error) {
	pids, _, err := t.members(t.roots())
	return pids, err
}

// members lists the tree's members now, sorted; allIn reports that every
// descendant of the roots was in the cgroup's listing (so cgroup.kill
// alone reaches every member found).
func (t Target) members(roots []int) (pids []int, allIn bool, err error) {
	var inGroup map[int]bool
	if t.Cgroup != "" {
		cg, err := cgroup.Open(t.Cgroup).AllProcs()
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, false, err
		}
		pids = append(pids, cg...)
		if len(roots) > 0 {
			inGroup = make(map[int]bool, len(cg))
			for _, p := range cg {
				inGroup[p] = true
			}
		}
	}
	allIn = t.Cgroup != ""
	if len(roots) > 0 {
		for _, p := range descendantsOf(roots) {
			if !inGroup[p] {
				allIn = false
				pids = append(pids, p)
			}
		}
	}
	for _, r := range roots {
		if t.isLeader(r) {
			pids = append(pids, r)
			allIn = false
		}
	}
	slices.Sort(pids)
	pids = slices.Compact(pids)
	return slices.DeleteFunc(pids, func(p int) bool { return slices.Contains(roots, p) && !t.isLeader(p) }), allIn, nil
}

// maxDescendants bounds one walk along the children files; a tree that
// is larger is listed by the walk of all of /proc instead.
var maxDescendants = 1 << 16 // a variable for the tests

// maxChildrenFile bounds one children file; a larger one (more than half
// a million children of one thread) sends the listing to the /proc walk.
const maxChildrenFile = 1 << 22

var (
	childrenOnce  sync.Once
	childrenFiles bool
)

// haveChildrenFiles reports whether the kernel has
// /proc/PID/task/TID/children (CONFIG_PROC_CHILDREN).
func haveChildrenFiles() bool {
	childrenOnce.Do(func() {
		p := strconv.Itoa(os.Getpid())
		_, err := os.Stat("/proc/" + p + "/task/" + p + "/children")
		childrenFiles = err == nil
	})
	return childrenFiles
}

// alive reports whether a process whose stat reads st still runs: not a
// zombie, or a zombie thread-group leader whose other threads live on
// (after the main thread's pthread_exit, stat says Z but num_threads
// still counts the others).
func alive(st linux.ProcStat) bool {
	return st.State != 'X' && (st.State != 'Z' || st.Threads > 1)
}

// descendantsOf lists the live descendants of roots. It follows each
// process's children files down from the roots, so its cost is the
// tree's size, not the host's; without those files, or for a tree too
// large for them, it walks all of /proc. Like any listing of a live tree
// it is a snapshot: the stop's repeated listings and re-checks through
// pidfds make it a proof.
func descendantsOf(roots []int) []int {
	if !haveChildrenFiles() {
		return walkDescendants(roots)
	}
	queue := slices.Clone(roots)
	seen := make(map[int]bool, len(roots))
	for _, r := range roots {
		seen[r] = true
	}
	buf := make([]byte, 4096)
	var out []int
	for i := 0; i < len(queue); i++ {
		pid := queue[i]
		st, err := linux.ReadStat(pid)
		if err != nil {
			continue // gone
		}
		if i >= len(roots) && alive(st) {
			out = append(out, pid)
		}
		if !alive(st) {
			// A dead zombie has handed all its children on: nothing
			// below it (after a kill, the root's unreaped children are
			// all such).
			continue
		}
		kids, nbuf, ok := childrenOf(pid, st, buf)
		buf = nbuf
		if !ok {
			return walkDescendants(roots)
		}
		for _, k := range kids {
			if !seen[k] {
				if len(queue) >= maxDescendants {
					return walkDescendants(roots)
				}
				seen[k] = true
				queue = append(queue, k)
			}
		}
	}
	return out
}

// childrenOf reads pid's children: the children file of each of its
// threads (a child belongs to the thread that forked it), or only the
// main thread's when it is the only one. ok is false when a file is too
// large to read.
func childrenOf(pid int, st linux.ProcStat, buf []byte) (kids []int, _ []byte, ok bool) {
	base := "/proc/" + strconv.Itoa(pid) + "/task/"
	tids := []string{strconv.Itoa(pid)}
	if st.Threads != 1 || st.State == 'Z' {
		ents, err := os.ReadDir(base)
		if err != nil {
			return nil, buf, true // gone
		}
		tids = tids[:0]
		for _, e := range ents {
			tids = append(tids, e.Name())
		}
	}
	for _, tid := range tids {
		var n int
		var err error
		for {
			n, err = linux.ReadSmall(base+tid+"/children", buf)
			if !errors.Is(err, unix.EFBIG) {
				break
			}
			if len(buf) >= maxChildrenFile {
				return nil, buf, false
			}
			buf = make([]byte, 4*len(buf))
		}
		if err != nil {
			continue // the thread or the process is gone
		}
		v, in := 0, false
		for _, c := range buf[:n] {
			if c >= '0' && c <= '9' {
				v, in = v*10+int(c-'0'), true
				continue
			}
			if in {
				kids = append(kids, v)
			}
			v, in = 0, false
		}
		if in {
			kids = append(kids, v)
		}
	}
	return kids, buf, true
}

// walkDescendants walks /proc for the live descendants of roots.
func walkDescendants(roots []int) []int {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	parent := map[int]int{}
	live := map[int]bool{}
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		st, err := linux.ReadStat(pid)
		if err != nil {
			continue
		}
		// Zombies stay in the table: a zombie leader's other threads may
		// have forked children that name it as their parent.
		parent[pid] = st.PPID
		live[pid] = alive(st)
	}
	memo := map[int]bool{}
	var isDesc func(pid, depth int) bool
	isDesc = func(pid, depth int) bool {
		if v, ok := memo[pid]; ok {
			return v
		}
		pp, ok := parent[pid]
		r := false
		switch {
		case !ok || depth > 4096:
		case slices.Contains(roots, pp):
			r = true
		default:
			r = isDesc(pp, depth+1)
		}
		memo[pid] = r
		return r
	}
	var out []int
	for pid := range parent {
		if live[pid] && isDesc(pid, 0) {
			out = append(out, pid)
		}
	}
	return out
}

// handle is one member opened through a pidfd and verified.
type handle struct {
	pid int
	fd  int
}

// open opens members through pidfds, keeping those that are still members
// after the open (the pidfd pins the PID, so the check is about exactly
// the process the descriptor refers to).
func (t Target) open(pids, roots []int) []handle {
	var hs []handle
	for _, pid := range pids {
		fd, err := unix.PidfdOpen(pid, 0)
		if err != nil {
			continue
		}
		if !t.member(pid, roots) {
			unix.Close(fd)
			continue
		}
		hs = append(hs, handle{pid, fd})
	}
	return hs
}

func closeAll(hs []handle) {
	for _, h := range hs {
		unix.Close(h.fd)
	}
}

func signal(hs []handle, sig syscall.Signal) int {
	n := 0
	for _, h := range hs {
		if unix.PidfdSendSignal(h.fd, sig, nil, 0) == nil {
			n++
		}
	}
	return n
}

// waitExited waits until every handle's process has exited, ctx ends or
// the time runs out; it reports whether all exited.
func waitExited(ctx context.Context, hs []handle, d time.Duration) bool {
	end := time.Now().Add(d)
	left := slices.Clone(hs)
	for {
		fds := make([]unix.PollFd, len(left))
		for i, h := range left {
			fds[i] = unix.PollFd{Fd: int32(h.fd), Events: unix.POLLIN}
		}
		if len(fds) == 0 {
			return true
		}
		wait := time.Until(end)
		if wait <= 0 || ctx.Err() != nil {
			return false
		}
		if wait > 50*time.Millisecond {
			wait = 50 * time.Millisecond
		}
		if _, err := unix.Poll(fds, int(wait/time.Millisecond)+1); err != nil && err != unix.EINTR {
			return false
		}
		var still []handle
		for i, f := range fds {
			if f.Revents&unix.POLLIN == 0 {
				still = append(still, left[i])
			}
		}
		left = still
	}
}

// Grace and verification bounds of a stop.
const (
	// freezeWait bounds waiting for a cgroup to report frozen.
	freezeWait = 500 * time.Millisecond
	// stableRounds bounds the listings that must agree before the kill.
	stableRounds = 10
	// verifyWait bounds waiting for killed members to be gone.
	verifyWait = 5 * time.Second
)

// Stop stops the tree: SIGTERM to every member, up to grace for them to
// exit, then the quiesced kill, then verification. A grace of zero or less
// kills at once. It returns ErrSurvivors (with Result.Survivors) when
// members remain; nothing is deleted.
func Stop(ctx context.Context, t Target, grace time.Duration) (Result, error) {
	var res Result
	roots := t.roots()
	if grace <= 0 {
		return Kill(ctx, t)
	}
	pids, allIn, err := t.members(roots)
	if err != nil {
		return res, fmt.Errorf("listing the tree: %w", err)
	}
	if len(pids) == 0 && t.gone(roots) {
		res.Stable = true
		return res, nil
	}
	hs := t.open(pids, roots)
	res.Signalled = signal(hs, syscall.SIGTERM)
	done := waitExited(ctx, hs, grace)
	closeAll(hs)
	if done && t.gone(roots) {
		// (Members that appeared during the grace are killed below.)
		res.Stable = true
		return res, nil
	}
	if t.killFirst() {
		if kr, ok, err := killGroup(ctx, t, roots); ok {
			kr.Signalled = res.Signalled
			return kr, err
		}
	}
	pids, allIn, err = t.members(roots)
	if err != nil {
		pids, allIn = nil, false
	}
	return kill(ctx, t, roots, res, pids, allIn, false)
}

// Kill kills the tree at once (the quiesced kill and its verification).
func Kill(ctx context.Context, t Target) (Result, error) {
	roots := t.roots()
	if t.killFirst() {
		if res, ok, err := killGroup(ctx, t, roots); ok {
			return res, err
		}
	}
	var res Result
	first, allIn, err := t.members(roots)
	if err != nil {
		// Quiesce and kill what can be found all the same.
		first, allIn = nil, false
	} else if len(first) == 0 && t.gone(roots) {
		res.Stable = true
		return res, nil
	}
	return kill(ctx, t, roots, res, first, allIn, false)
}

// killFirst says whether a kill may start with cgroup.kill, before any
// listing of the tree: the tree has a cgroup, and a member outside it
// can't be lost by the kill (no roots, so no member is outside it, or
// roots that are subreapers).
func (t Target) killFirst() bool {
	return t.Cgroup != "" && len(t.Leaders) == 0 && (len(t.Roots) == 0 || t.Subreapers)
}

// killGroup is the kill of a tree that has a cgroup, given killFirst:
// cgroup.kill first, with no listing of the tree before it (a listing
// reads every member's children files: 1.2–2 ms for 50 processes). The
// kernel ends every process in the group's subtree at once, forks
// meanwhile included. What it can't reach, a descendant of a
// root that moved itself out of the group, is handed to a root when its
// parent dies, so it is still found from the roots down once the group is
// empty, and the quiesced kill ends it. ok is false when the group can't
// be read; the caller then lists the tree first.
func killGroup(ctx context.Context, t Target, roots []int) (res Result, ok bool, err error) {
	g := cgroup.Open(t.Cgroup)
	in, err := g.AllProcs()
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return res, false, nil
	}
	if len(in) == 0 && t.gone(roots) {
		res.Stable = true
		return res, true, nil
	}
	killed := len(in) > 0 && g.Kill() == nil
	if killed {
		res.Killed = len(in)
		wctx, cancel := context.WithTimeout(ctx, verifyWait)
		_ = g.WaitEmpty(wctx)
		cancel()
		if t.gone(roots) {
			res.Stable = true
			return res, true, nil
		}
	}
	res, err = kill(ctx, t, roots, res, nil, false, killed)
	return res, true, err
}

// gone reports that the tree has no members by two listings in a row. A
// member that exits hands its children to the tree's root (their
// subreaper) in the same step that makes it a zombie, and one listing can
// straddle that step: it reads the root's children before the move and
// the exiting member's after it. A listing that starts after the first
// one ended sees the moved children under the root.
func (t Target) gone(roots []int) bool {
	for i := 0; i < 2; i++ {
		if pids, _, err := t.members(roots); err != nil || len(pids) > 0 {
			return false
		}
	}
	return true
}

// kill is the kill step, given the tree's latest listing (first) and
// whether every descendant in it was in the cgroup's listing. killed says
// that the group was killed already (killGroup): what is left is outside
// it, and nothing is frozen.
func kill(ctx context.Context, t Target, roots []int, res Result, first []int, allIn, killed bool) (Result, error) {
	var g *cgroup.Group
	if t.Cgroup != "" {
		g = cgroup.Open(t.Cgroup)
	}
	if g != nil && !killed {
		// Every member inside the cgroup: cgroup.kill alone ends them
		// all, atomically (the kernel kills what is forked meanwhile too),
		// so there is nothing to quiesce. Only if something is left
		// (a member that moved itself out just now) is the quiesced kill
		// below needed.
		if allIn && len(first) > 0 && g.Kill() == nil {
			wctx, cancel := context.WithTimeout(ctx, verifyWait)
			_ = g.WaitEmpty(wctx)
			cancel()
			if t.gone(roots) {
				res.Killed += len(first)
				res.Stable = true
				return res, nil
			}
		}
		if g.SetFrozen(true) == nil {
			res.Froze = true
			fctx, cancel := context.WithTimeout(ctx, freezeWait)
			_, _ = g.WaitEvent(fctx, func(e cgroup.Events) bool { return e.Frozen || !e.Populated })
			cancel()
		}
	}
	var all []handle
	defer func() { closeAll(all) }()
	seen := map[int]bool{}
	add := func(pids []int) {
		var fresh []int
		for _, p := range pids {
			if !seen[p] {
				fresh = append(fresh, p)
			}
		}
		for _, h := range t.open(fresh, roots) {
			seen[h.pid] = true
			all = append(all, h)
			if t.Cgroup == "" || !t.inCgroup(h.pid) {
				// Outside the frozen cgroup: stop it so it can't fork.
				_ = unix.PidfdSendSignal(h.fd, syscall.SIGSTOP, nil, 0)
				if t.Cgroup != "" {
					res.Outsiders++
				}
			}
		}
	}
	prev, _, _ := t.members(roots)
	add(prev)
	for round := 0; round < stableRounds; round++ {
		cur, _, err := t.members(roots)
		if err != nil {
			break
		}
		if slices.Equal(prev, cur) {
			res.Stable = true
			break
		}
		add(cur)
		prev = cur
		time.Sleep(2 * time.Millisecond)
	}
	if g != nil {
		if err := g.Kill(); err != nil && !errors.Is(err, os.ErrNotExist) && res.Froze {
			res.Froze = g.SetFrozen(false) != nil
			return res, fmt.Errorf("killing the tree: %w", err)
		}
	}
	res.Killed = max(res.Killed, signal(all, syscall.SIGKILL))
	exited := waitExited(ctx, all, verifyWait)
	if g != nil {
		wctx, cancel := context.WithTimeout(ctx, verifyWait)
		_ = g.WaitEmpty(wctx)
		cancel()
		if res.Froze {
			// Thaw only what this stop froze; the group may be gone.
			_ = g.SetFrozen(false)
		}
	}
	if !exited {
		for _, h := range all {
			if !pidfdExited(h.fd) {
				// Resume what this stop suspended: a survivor is left as
				// it was found.
				_ = unix.PidfdSendSignal(h.fd, syscall.SIGCONT, nil, 0)
				if id, err := linux.IdentityOf(h.pid); err == nil {
					res.Survivors = append(res.Survivors, id)
				}
			}
		}
	}
	if rest, _, err := t.members(roots); err == nil {
		for _, pid := range rest {
			if !seen[pid] {
				if id, err := linux.IdentityOf(pid); err == nil {
					res.Survivors = append(res.Survivors, id)
				}
			}
		}
	}
	if len(res.Survivors) > 0 {
		return res, fmt.Errorf("%d process(es) survived the kill (%s): %w", len(res.Survivors), describe(res.Survivors), ErrSurvivors)
	}
	return res, nil
}

func pidfdExited(fd int) bool {
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	n, _ := unix.Poll(fds, 0)
	return n > 0
}

func describe(ids []linux.Identity) string {
	var parts []string
	for i, id := range ids {
		if i == 5 {
			parts = append(parts, "…")
			break
		}
		state := "?"
		if st, err := linux.ReadStat(id.PID); err == nil {
			state = string(st.State)
		}
		parts = append(parts, fmt.Sprintf("pid %d state %s", id.PID, state))
	}
	return strings.Join(parts, ", ")
}

// StuckWithZombies reports whether the supervisor id is stopped (SIGSTOP,
// or traced) with every child of it a zombie: as a subreaper its live
// descendants would be its children or theirs, so its tree has ended and
// only the stuck supervisor keeps the zombies from being reaped (issue 39,
// item 7). A zombie whose other threads run is alive.
func StuckWithZombies(id linux.Identity) bool {
	st, err := linux.ReadStat(id.PID)
	if err != nil || st.StartTime != id.StartTime || (st.State != 'T' && st.State != 't') {
		return false
	}
	kids, _, ok := childrenOf(id.PID, st, make([]byte, 4096))
	if !ok {
		return false
	}
	for _, k := range kids {
		ks, err := linux.ReadStat(k)
		if err == nil && (ks.State != 'Z' || ks.Threads > 1) {
			return false
		}
	}
	return true
}
