package hostfork

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/fault"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/registry"
	"github.com/habemus-papadum/hostfork/internal/supervise"
	"github.com/habemus-papadum/hostfork/internal/view"
)

// Output modes.
const (
	// OutputFiles writes straight to owned log files (survives the reader).
	OutputFiles = supervise.OutputFiles
	// OutputPipe also streams to Command.Stdout/Stderr while writing files.
	OutputPipe = supervise.OutputPipe
	// OutputInherit hands the workload the caller's descriptors; no files.
	OutputInherit = supervise.OutputInherit
)

// FinalDrain is how long output is still forwarded after the leader exits
// (DESIGN.md, Capture): descendants that keep a pipe open can't hold back
// the result.
const FinalDrain = 200 * time.Millisecond

// Command is one command tree in an environment. Set the exported fields,
// then Start. It is like exec.Cmd, except that Wait returns at leader exit
// and WaitTree when the whole tree is gone.
type Command struct {
	Argv []string
	// Cwd is the working directory ("" = the caller's).
	Cwd string
	// Env is the environment, used as given (with EnvSet applied); nil
	// means the one EnvPolicy resolves.
	Env []string
	// EnvPolicy is inherit, clean, host-shell or toolchain (spec.Env*);
	// "" means the environment's env_policy, else inherit. Every policy
	// removes inherited Git redirections (GIT_DIR, GIT_WORK_TREE, ...).
	EnvPolicy string
	// EnvSet holds explicit K=V variables applied last; they may set Git
	// redirections.
	EnvSet []string
	// Output is files (default), pipe or inherit.
	Output string
	// Stdin, Stdout, Stderr: with OutputInherit they are the workload's
	// descriptors (nil = the caller's own); with OutputPipe, Stdout and
	// Stderr receive the streamed copy.
	Stdin          *os.File
	Stdout, Stderr io.Writer
	// Foreground makes the workload the terminal's foreground job
	// (OutputInherit on a terminal).
	Foreground bool
	Purpose    string
	Labels     map[string]string
	// OwnerExit overrides the environment's owner-exit policy for this
	// command: "stop" ends the tree when the starting process exits,
	// "detach" lets it run on under the environment's deadline.
	OwnerExit string
	// Workload "agent" makes the command take part in admission with
	// Admit (wait, the default for agents; fail; skip). OnAdmissionWait is
	// called once if the command has to wait.
	Workload        string
	Admit           string
	OnAdmissionWait func(reason string)

	env        *Env
	id         string
	g          *supervise.Guardian
	mu         sync.Mutex
	rec        *registry.Command
	leaderDone chan struct{}
	treeDone   chan struct{}
	fwd        sync.WaitGroup
	fwdStop    chan struct{}
	// capture: what the launcher observed of each forwarded stream.
	capOut, capErr *StreamCapture
	// CaptureLimit bounds the bytes kept in memory per stream by Capture
	// (default MaxCapture); the artifact files keep everything.
	CaptureLimit int
}

// Command prepares a command in the environment.
func (e *Env) Command(argv ...string) *Command {
	return &Command{Argv: argv, env: e, Output: OutputFiles}
}

// ID is the command's id (after Start).
func (c *Command) ID() string { return c.id }

// Record returns a copy of the command's last known record.
func (c *Command) Record() registry.Command {
	c.mu.Lock()
	defer c.mu.Unlock()
	r := *c.rec
	return r
}

// gitRedirections are removed from inherited environments (DESIGN.md,
// Launch environment policy).
var gitRedirections = []string{"GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR"}

// InheritedEnv is os.Environ() without Git redirections.
func InheritedEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		drop := strings.HasPrefix(k, "GIT_CONFIG")
		for _, g := range gitRedirections {
			if k == g {
				drop = true
			}
		}
		if !drop {
			out = append(out, kv)
		}
	}
	return out
}

// LookPath resolves a program the way Start will, so a caller can reject a
// missing executable before creating anything.
func LookPath(argv0 string, env []string) (string, error) {
	if env == nil {
		env = InheritedEnv()
	}
	return lookPath(argv0, env)
}

// lookPathIn resolves argv0 as seen below root ("" = the host); the
// returned path is the one to exec inside that root.
func lookPathIn(root, argv0 string, env []string) (string, error) {
	if root == "" {
		return lookPath(argv0, env)
	}
	p, err := lookPath(filepathJoinRoot(root, argv0), env)
	if err == nil || strings.Contains(argv0, "/") {
		if err != nil {
			return "", err
		}
		return strings.TrimPrefix(p, root), nil
	}
	path := ""
	for _, kv := range env {
		if strings.HasPrefix(kv, "PATH=") {
			path = kv[5:]
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if !filepath.IsAbs(dir) {
			continue
		}
		cand := filepath.Join(dir, argv0)
		if st, err := os.Stat(root + cand); err == nil && !st.IsDir() && st.Mode()&0o111 != 0 {
			return cand, nil
		}
	}
	return "", fmt.Errorf("%q not found in PATH inside the environment's view: %w (install it or give its full path)", argv0, ErrExecutableNotFound)
}

func filepathJoinRoot(root, p string) string {
	if strings.Contains(p, "/") && filepath.IsAbs(p) {
		return root + p
	}
	return p
}

func lookPath(argv0 string, env []string) (string, error) {
	if strings.Contains(argv0, "/") {
		st, err := os.Stat(argv0)
		if err != nil {
			return "", fmt.Errorf("%s: %w (check the path)", argv0, ErrExecutableNotFound)
		}
		if st.IsDir() || st.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%s: %w (it is a directory or lacks execute permission)", argv0, ErrNotExecutable)
		}
		return argv0, nil
	}
	path := ""
	for _, kv := range env {
		if strings.HasPrefix(kv, "PATH=") {
			path = kv[5:]
		}
	}
	for _, dir := range filepath.SplitList(path) {
		if dir == "" {
			dir = "."
		}
		p := filepath.Join(dir, argv0)
		st, err := os.Stat(p)
		if err != nil || st.IsDir() {
			continue
		}
		if st.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%q not found in PATH: %w (install it or give its full path)", argv0, ErrExecutableNotFound)
}

// Start registers the command, starts its guardian at the gate, records the
// guardian's identity, then releases it. Nothing of the workload runs before
// its identity is durably registered; a failure before release leaves no
// process and a settled ledger.
func (c *Command) Start(ctx context.Context) error {
	if c.rec != nil {
		return errors.New("hostfork: Command already started")
	}
	if len(c.Argv) == 0 || c.Argv[0] == "" {
		return fmt.Errorf("empty command: give the program to run after --: %w", ErrInvalid)
	}
	e := c.env
	h := e.h
	if c.Output == "" {
		c.Output = OutputFiles
	}
	switch c.Output {
	case OutputFiles, OutputPipe, OutputInherit:
	default:
		return fmt.Errorf("output mode %q: use files, pipe or inherit: %w", c.Output, ErrInvalid)
	}
	envv, envPolicy, envNote, err := h.commandEnv(ctx, e, c)
	if err != nil {
		return err
	}
	var admitted func()
	var decision string
	if c.Workload == WorkloadAgent {
		rel, d, err := h.admitCommand(ctx, c.Admit, c.OnAdmissionWait)
		if err != nil {
			return err
		}
		admitted, decision = rel, d
		defer func() {
			if admitted != nil {
				admitted()
			}
		}()
	} else if c.Workload != "" {
		return fmt.Errorf("workload kind %q: the only kind is %q: %w", c.Workload, WorkloadAgent, ErrInvalid)
	}
	envRec := e.Record()
	if envRec.State != registry.EnvActive {
		return fmt.Errorf("environment %s is %s; create a new one: %w", envRec.ID, envRec.State, ErrEnvNotActive)
	}
	// With a view, paths are resolved inside it: through the keeper's
	// root (/proc/KEEPER/root), never as an open host directory.
	viewRoot := ""
	if envRec.Keeper != nil {
		if linux.Assess(linuxIdentity(envRec.Keeper)) != linux.Alive {
			return fmt.Errorf("environment %s: %w; new commands are refused (stop it and create a new one): %w", envRec.ID, view.ErrKeeperLost, ErrEnvNotActive)
		}
		viewRoot = fmt.Sprintf("/proc/%d/root", envRec.Keeper.PID)
	}
	path, err := lookPathIn(viewRoot, c.Argv[0], envv)
	if err != nil {
		return err
	}
	cwd := c.Cwd
	if cwd != "" {
		if !filepath.IsAbs(cwd) {
			abs, err := filepath.Abs(cwd)
			if err != nil {
				return fmt.Errorf("--cwd %s: %v: %w", cwd, err, ErrInvalid)
			}
			cwd = abs
		}
		if st, err := os.Stat(viewRoot + cwd); err != nil || !st.IsDir() {
			where := ""
			if viewRoot != "" {
				where = " in the environment's view"
			}
			return fmt.Errorf("working directory %s does not exist%s or is not a directory: %w", cwd, where, ErrInvalid)
		}
	} else if wd, err := os.Getwd(); err == nil {
		cwd = wd
		if viewRoot != "" {
			if st, err := os.Stat(viewRoot + cwd); err != nil || !st.IsDir() {
				cwd = "/"
			}
		}
	}
	boot, _ := linux.BootID()
	self, _ := linux.IdentityOf(os.Getpid())
	id := newID()
	dir := filepath.Join(envRec.RunDir, "commands", id)
	rec := &registry.Command{
		ID:           id,
		EnvID:        envRec.ID,
		State:        registry.CmdReserved,
		CreatedAt:    time.Now().UTC(),
		Purpose:      firstNonEmpty(c.Purpose, envRec.Purpose),
		Labels:       mergeLabels(envRec.Labels, c.Labels),
		Argv:         c.Argv,
		Cwd:          cwd,
		Output:       c.Output,
		Dir:          dir,
		Tier:         envRec.Tier,
		Launcher:     regIdentity(self),
		LeaderState:  registry.Pending,
		TreeState:    registry.Pending,
		WorkloadKind: c.Workload,
		Admission:    decision,
	}
	rec.EnvPolicy, rec.EnvPolicyNote = envPolicy, envNote
	if c.Output != OutputInherit {
		rec.StdoutPath = filepath.Join(dir, "stdout")
		rec.StderrPath = filepath.Join(dir, "stderr")
	}
	if envRec.CgroupPath != "" {
		rec.CgroupPath = filepath.Join(envRec.CgroupPath, "commands", id)
	}
	var dirIntent, cgIntent int64
	err = h.reg.Write(ctx, func(tx *registry.Tx) error {
		cur, err := tx.Env(envRec.ID)
		if err != nil {
			return err
		}
		if cur.State != registry.EnvActive {
			return fmt.Errorf("environment %s is %s; create a new one: %w", cur.ID, cur.State, ErrEnvNotActive)
		}
		if cur.DeadlineMono > 0 && cur.BootID == boot && linux.MonotonicNow() >= cur.DeadlineMono-cur.Grace {
			return fmt.Errorf("environment %s has reached its deadline: %w", cur.ID, ErrEnvNotActive)
		}
		if err := tx.InsertCommand(rec); err != nil {
			return err
		}
		if dirIntent, err = tx.AddIntent(envRec.ID, id, "dir", dir); err != nil {
			return err
		}
		if rec.CgroupPath != "" {
			cgIntent, err = tx.AddIntent(envRec.ID, id, "cgroup", rec.CgroupPath)
		}
		return err
	})
	if err != nil {
		return fmt.Errorf("registering the command: %w", err)
	}
	if admitted != nil {
		// Registered: the command now counts as live for the next decision.
		admitted()
		admitted = nil
	}
	fault.Point(fault.CommandReserved)
	c.id = id
	c.rec = rec
	c.leaderDone = make(chan struct{})
	c.treeDone = make(chan struct{})

	var opened []*os.File
	closeOpened := func() {
		for _, f := range opened {
			f.Close()
		}
	}
	abort := func(cause error) error {
		closeOpened()
		h.abortCommand(rec, cause)
		return cause
	}
	if err := os.Mkdir(dir, 0o700); err != nil {
		return abort(fmt.Errorf("creating command directory: %w", err))
	}
	create := func(p string) (*os.File, error) {
		f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY|os.O_APPEND|syscall.O_CLOEXEC, 0o600)
		if err == nil {
			opened = append(opened, f)
		}
		return f, err
	}
	receipt, err := os.OpenFile(filepath.Join(dir, "receipt"), os.O_CREATE|os.O_EXCL|os.O_RDWR|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return abort(fmt.Errorf("creating receipt: %w", err))
	}
	opened = append(opened, receipt)
	var rst unix.Stat_t
	if err := unix.Fstat(int(receipt.Fd()), &rst); err != nil {
		return abort(fmt.Errorf("stat receipt: %w", err))
	}
	rec.ProofDev, rec.ProofIno = rst.Dev, rst.Ino
	ss := supervise.StartSpec{Exe: h.opts.Exe, Receipt: receipt, Setsid: !c.Foreground}
	switch c.Output {
	case OutputInherit:
		ss.Stdin, ss.Stdout, ss.Stderr = c.Stdin, fileOr(c.Stdout, os.Stdout), fileOr(c.Stderr, os.Stderr)
		if ss.Stdin == nil {
			ss.Stdin = os.Stdin
		}
	default:
		if ss.Stdout, err = create(rec.StdoutPath); err != nil {
			return abort(fmt.Errorf("creating stdout file: %w", err))
		}
		if ss.Stderr, err = create(rec.StderrPath); err != nil {
			return abort(fmt.Errorf("creating stderr file: %w", err))
		}
		ss.Stdin = c.Stdin
		ss.Forward = c.Output == OutputPipe
	}
	glog, err := create(filepath.Join(dir, "guardian.log"))
	if err != nil {
		return abort(fmt.Errorf("creating guardian log: %w", err))
	}
	ss.Log = glog
	var wlPath string
	if rec.CgroupPath != "" {
		if _, err := cgroup.Create(rec.CgroupPath); err != nil {
			return abort(fmt.Errorf("creating the command's cgroup: %w", err))
		}
		ss.GuardianCgroup = filepath.Join(rec.CgroupPath, "guardian")
		wlPath = filepath.Join(rec.CgroupPath, "workload")
		if _, err := cgroup.Create(ss.GuardianCgroup); err != nil {
			return abort(fmt.Errorf("creating the command's cgroup: %w", err))
		}
		if _, err := cgroup.Create(wlPath); err != nil {
			return abort(fmt.Errorf("creating the command's cgroup: %w", err))
		}
		rec.CgroupInode, _ = cgroup.Open(rec.CgroupPath).Inode()
	}
	if n, ok := oomCount(&envRec); ok {
		rec.OOMBaseline = &n
	}
	g, err := supervise.Start(ss)
	if err != nil {
		return abort(err)
	}
	if lg := limitGroup(&envRec); lg != nil {
		// cgroup v1 has no clone-into: the gated guardian joins the
		// environment's limit groups before anything runs; the workload
		// inherits them.
		if err := lg.Join(g.ID.PID); err != nil {
			g.Abort()
			return abort(fmt.Errorf("placing the command in its limit groups: %w", err))
		}
	}
	fault.Point(fault.GuardianStarted)
	closeOpened()
	rec.Guardian = regIdentity(g.ID)
	rec.State = registry.CmdRunning
	err = h.reg.Write(ctx, func(tx *registry.Tx) error {
		// A stop that began since the reservation revokes this gate.
		cur, err := tx.Env(envRec.ID)
		if err != nil {
			return err
		}
		if cur.State != registry.EnvActive {
			return fmt.Errorf("environment %s is %s: the launch gate is revoked: %w", cur.ID, cur.State, ErrEnvNotActive)
		}
		if err := tx.SettleIntent(dirIntent, registry.IntentCreated, identityJSON(dir), ""); err != nil {
			return err
		}
		if cgIntent != 0 {
			if err := tx.SettleIntent(cgIntent, registry.IntentCreated, fmt.Sprintf(`{"inode":%d}`, rec.CgroupInode), ""); err != nil {
				return err
			}
		}
		return tx.UpdateCommand(rec)
	})
	if err != nil {
		// Not durably registered: revoke the gate; nothing ran.
		g.Abort()
		rec.State = registry.CmdReserved
		return abort(fmt.Errorf("registering the guardian: %w", err))
	}
	fault.Point(fault.GuardianRegistered)
	cfg := &supervise.Config{
		CommandID:      id,
		EnvID:          envRec.ID,
		Argv:           c.Argv,
		Path:           path,
		Env:            envv,
		Cwd:            cwd,
		Output:         c.Output,
		WorkloadCgroup: wlPath,
		Grace:          envRec.Grace,
		Idle:           envRec.IdleTimeout,
		OwnerExit:      envRec.OwnerExit,
		Foreground:     c.Foreground,
	}
	if envRec.Keeper != nil {
		cfg.ViewPID = envRec.Keeper.PID
	}
	if c.OwnerExit != "" {
		cfg.OwnerExit = c.OwnerExit
	}
	if envRec.DeadlineMono > 0 && envRec.BootID == boot {
		cfg.DeadlineMono = envRec.DeadlineMono
	}
	c.g = g
	if g.ForwardOut != nil {
		c.fwdStop = make(chan struct{})
		c.capOut = newStreamCapture(c.captureLimit())
		c.capErr = newStreamCapture(c.captureLimit())
		c.forward(g.ForwardOut, c.Stdout, c.capOut)
		c.forward(g.ForwardErr, c.Stderr, c.capErr)
	}
	if err := g.Release(cfg); err != nil {
		// The guardian is registered; it exits on its own at EOF. The
		// record is settled from its receipt like any other loss.
		g.Abort()
		c.closeWaiters()
		return fmt.Errorf("releasing the command: %w", err)
	}
	fault.Point(fault.Released)
	go c.watch()
	return nil
}

func fileOr(w io.Writer, def *os.File) *os.File {
	if f, ok := w.(*os.File); ok {
		return f
	}
	return def
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

func mergeLabels(a, b map[string]string) map[string]string {
	if len(a) == 0 && len(b) == 0 {
		return nil
	}
	out := map[string]string{}
	for k, v := range a {
		out[k] = v
	}
	for k, v := range b {
		out[k] = v
	}
	return out
}

// forward copies a forwarded stream to w until EOF, or until the final
// drain after leader exit has passed.
func (c *Command) forward(r *os.File, w io.Writer, st *StreamCapture) {
	if w == nil {
		w = io.Discard
	}
	c.fwd.Add(1)
	go func() {
		defer c.fwd.Done()
		defer r.Close()
		buf := make([]byte, 64<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				_, _ = w.Write(buf[:n])
				st.add(buf[:n])
			}
			if err != nil {
				st.finish(err)
				return
			}
		}
	}()
}

// watch follows the guardian's events. Each event is a wakeup: the facts
// come from the verified receipt, so live events and later settlement use
// one merge.
func (c *Command) watch() {
	evs := c.g.Events()
	leaderClosed := false
	for ev := range evs {
		// Coalesce events that are already queued into one registry write.
		for more := true; more; {
			select {
			case e2, ok := <-evs:
				if !ok {
					more = false
				} else {
					ev = e2
				}
			default:
				more = false
			}
		}
		c.refresh()
		if !leaderClosed && (ev.Kind == "leader" || ev.Kind == "exec-failed" || ev.Kind == "tree") {
			leaderClosed = true
			c.endForwarding()
			close(c.leaderDone)
		}
		if ev.Kind == "tree" || ev.Kind == "exec-failed" {
			break
		}
	}
	_ = c.g.Reap()
	c.refresh()
	if !leaderClosed {
		c.endForwarding()
		close(c.leaderDone)
	}
	// The snapshot is written before WaitTree returns, so nothing of
	// this command is still writing in the store afterwards.
	c.mu.Lock()
	writeCommandRecord(c.rec)
	c.mu.Unlock()
	close(c.treeDone)
}

// endForwarding gives forwarded output the fixed final drain, then stops.
func (c *Command) endForwarding() {
	if c.fwdStop == nil {
		return
	}
	done := make(chan struct{})
	go func() { c.fwd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(FinalDrain):
		// Descendants still hold the pipe: stop reading. The guardian keeps
		// writing the files; its forward copy gets EPIPE.
		for _, f := range []*os.File{c.g.ForwardOut, c.g.ForwardErr} {
			_ = f.SetReadDeadline(time.Now())
		}
		<-done
	}
}

func (c *Command) closeWaiters() {
	select {
	case <-c.leaderDone:
	default:
		close(c.leaderDone)
	}
	select {
	case <-c.treeDone:
	default:
		close(c.treeDone)
	}
}

// refresh settles the in-memory record from the receipt and writes it.
func (c *Command) refresh() {
	h := c.env.h
	c.mu.Lock()
	defer c.mu.Unlock()
	updated, err := h.settleCommand(context.Background(), c.rec)
	if err == nil && updated != nil {
		c.rec = updated
	}
}

// Wait waits for the leader process to exit and returns the record at that
// point. Descendants may still be running (see WaitTree).
func (c *Command) Wait(ctx context.Context) (registry.Command, error) {
	if c.leaderDone == nil {
		return registry.Command{}, errors.New("hostfork: Command not started")
	}
	select {
	case <-c.leaderDone:
		return c.Record(), nil
	case <-ctx.Done():
		return c.Record(), ctx.Err()
	}
}

// WaitTree waits until the whole tree is gone.
func (c *Command) WaitTree(ctx context.Context) (registry.Command, error) {
	if c.treeDone == nil {
		return registry.Command{}, errors.New("hostfork: Command not started")
	}
	select {
	case <-c.treeDone:
		return c.Record(), nil
	case <-ctx.Done():
		return c.Record(), ctx.Err()
	}
}

// Signal sends sig to the leader process (only; see StopTree).
func (c *Command) Signal(sig syscall.Signal) error {
	if c.g == nil {
		return errors.New("hostfork: Command not started")
	}
	return c.g.Signal(sig)
}

// StopTree stops the whole command tree (see Host.StopCommand).
func (c *Command) StopTree(ctx context.Context, opts StopOptions) error {
	_, err := c.env.h.StopCommand(ctx, c.id, opts)
	select {
	case <-c.treeDone:
	case <-ctx.Done():
	}
	return err
}

// ExitStatus is the shell-style status of a record: the exit code, or
// 128+signal. ok is false while the leader's status is unknown.
func ExitStatus(r registry.Command) (status int, ok bool) {
	if r.ExitCode != nil {
		return *r.ExitCode, true
	}
	if r.Signal != nil {
		return 128 + *r.Signal, true
	}
	return 0, false
}

// abortCommand settles a command whose launch failed before release.
func (h *Host) abortCommand(rec *registry.Command, cause error) {
	ctx := context.Background()
	var cleanup []string
	if rec.CgroupPath != "" {
		if err := cgroup.Open(rec.CgroupPath).Remove(); err != nil && !errors.Is(err, fs.ErrNotExist) {
			cleanup = append(cleanup, err.Error())
		}
	}
	_ = h.reg.Write(ctx, func(tx *registry.Tx) error {
		cur, err := tx.Command(rec.ID)
		if err != nil {
			return err
		}
		cur.State = registry.CmdFailed
		cur.Error = cause.Error()
		cur.LeaderState = registry.Unknown
		cur.TreeState = registry.Exited
		cur.TreeEvidence = "never released"
		cur.CleanupErrors = append(cur.CleanupErrors, cleanup...)
		if err := tx.UpdateCommand(cur); err != nil {
			return err
		}
		ins, err := h.reg.Intents(ctx, rec.EnvID, registry.IntentPending, registry.IntentCreated)
		if err != nil {
			return err
		}
		for _, in := range ins {
			if in.CommandID != rec.ID {
				continue
			}
			state := registry.IntentReleased
			if in.State == registry.IntentPending {
				state = registry.IntentAbandoned
			}
			if in.Kind == "dir" {
				if _, err := os.Stat(in.Target); err == nil {
					// The directory keeps the evidence of the failed launch.
					if err := tx.SettleIntent(in.ID, registry.IntentCreated, identityJSON(in.Target), ""); err != nil {
						return err
					}
					continue
				}
			} else if _, err := os.Stat(in.Target); err == nil {
				continue
			}
			if err := tx.SettleIntent(in.ID, state, "", ""); err != nil {
				return err
			}
		}
		return nil
	})
	if cur, err := h.reg.Command(ctx, rec.ID); err == nil {
		writeCommandRecord(cur)
	}
}
