package engine

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/admission"
	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/evidence"
	"github.com/habemus-papadum/hostfork/internal/fault"
	"github.com/habemus-papadum/hostfork/internal/launchenv"
	"github.com/habemus-papadum/hostfork/internal/limits"
	"github.com/habemus-papadum/hostfork/internal/linux"
	"github.com/habemus-papadum/hostfork/internal/provision"
	"github.com/habemus-papadum/hostfork/internal/records"
	"github.com/habemus-papadum/hostfork/internal/registry"
	"github.com/habemus-papadum/hostfork/internal/safefs"
	"github.com/habemus-papadum/hostfork/internal/supervise"
)

// WorkloadAgent marks a command as an agent workload: it takes part in
// admission (DESIGN.md, "Not overload the host").
const WorkloadAgent = admission.WorkloadAgent

// CommandSpec is one command to launch.
type CommandSpec struct {
	Argv []string
	// Cwd is the working directory ("" = the caller's), resolved inside
	// the view.
	Cwd string
	// Env is the environment as given (nil: EnvPolicy resolves it);
	// EnvSet are explicit K=V variables applied last.
	Env       []string
	EnvPolicy string
	EnvSet    []string
	Output    api.OutputMode
	// Stdin is the workload's standard input (nil: /dev/null).
	Stdin *os.File
	// Stdout and Stderr receive the streamed copy (pipe mode) or are the
	// workload's own descriptors (inherit mode; nil: the caller's).
	Stdout, Stderr io.Writer
	// Foreground makes the workload the terminal's foreground job (its
	// stdin is a terminal).
	Foreground bool
	Purpose    string
	Labels     map[string]string
	// OwnerExit overrides the environment's owner-exit policy for this
	// command.
	OwnerExit string
	// Workload "agent" takes part in admission with Admit (wait, fail or
	// skip); OnAdmissionWait is called once if it has to wait.
	Workload        string
	Admit           string
	OnAdmissionWait func(reason string)
	// Capture keeps the streamed output (at most CaptureLimit bytes per
	// stream) for Running.Capture.
	Capture      bool
	CaptureLimit int
	// Timeout is the command's own timeout (0: none); it never extends
	// the environment's deadline.
	Timeout time.Duration
	// AutoStop (Create with a first command only): the environment stops
	// when this command's tree has exited.
	AutoStop bool
	// Session is "tty" (a pseudo-terminal of TTYCols x TTYRows, 80x24 if
	// zero) or "stdin" (a stdin pipe) held by the guardian and served on
	// its session socket (docs/sessions.md); "" none.
	Session          string
	TTYCols, TTYRows uint16
}

// launch is one command being launched: reserved, prepared at the gate,
// registered, released. Each step is a small function; what a failed step
// leaves is undone by abort.
type launch struct {
	e  *Engine
	cs *CommandSpec
	// rec is the command's record (reserved, then running); regRev the
	// revision the registry holds.
	rec     *api.Command
	intents []*registry.Intent
	// admission
	admitted func()
	decision string
	// resolved
	policy, note string
	keys         []string
	cwd          string
	envv         []string
	path         string
	view         *launchenv.ViewRoot
	keeperPID    int
	keeperStart  uint64
	deadlineMono time.Duration
	// prepared
	g      *supervise.Guardian
	opened []*os.File
	files  []namedFile
	wlPath string
	v1join []string
	lg     *limits.Group
	gcg    string
	mount  string
}

// newLaunch validates a command and takes its admission (an agent
// workload keeps the admission lock until its reservation commits).
func (e *Engine) newLaunch(ctx context.Context, cs *CommandSpec) (*launch, error) {
	if len(cs.Argv) == 0 || cs.Argv[0] == "" {
		return nil, fmt.Errorf("empty command: give the program to run after --: %w", api.ErrInvalid)
	}
	cs.Output = cmp.Or(cs.Output, api.OutputFiles)
	switch cs.Output {
	case api.OutputFiles, api.OutputPipe, api.OutputInherit:
	default:
		return nil, fmt.Errorf("output mode %q: use files, pipe or inherit: %w", cs.Output, api.ErrInvalid)
	}
	if cs.Timeout < 0 {
		return nil, fmt.Errorf("timeout %v is negative: %w", cs.Timeout, api.ErrInvalid)
	}
	if err := checkSession(cs); err != nil {
		return nil, err
	}
	switch cs.OwnerExit {
	case "", api.OwnerExitStop, api.OwnerExitDetach:
	default:
		return nil, fmt.Errorf("owner-exit %q: use stop or detach: %w", cs.OwnerExit, api.ErrInvalid)
	}
	l := &launch{e: e, cs: cs}
	if cs.Workload == WorkloadAgent {
		rel, d, err := e.admission().Admit(ctx, cs.Admit, cs.OnAdmissionWait)
		if err != nil {
			return nil, err
		}
		l.admitted, l.decision = rel, d
	} else if cs.Workload != "" {
		return nil, fmt.Errorf("workload kind %q: the only kind is %q: %w", cs.Workload, WorkloadAgent, api.ErrInvalid)
	}
	return l, nil
}

func (l *launch) releaseAdmission() {
	if l.admitted != nil {
		l.admitted()
		l.admitted = nil
	}
}

// reserved: the command is registered, so it counts as live for the next
// admission decision.
func (l *launch) reserved() {
	l.releaseAdmission()
	fault.Point(fault.CommandReserved)
}

// reserve adds the command's reservation (record and intents) to b.
func (l *launch) reserve(b *registry.Batch, env *api.Env, lh *limits.Host) {
	cs := l.cs
	boot, _ := linux.BootID()
	self, _ := linux.IdentityOf(os.Getpid())
	id := newID()
	dir := filepath.Join(env.RunDir, "commands", id)
	labels := map[string]string{}
	maps.Copy(labels, env.Labels)
	maps.Copy(labels, cs.Labels)
	purpose := cmp.Or(cs.Purpose, env.Purpose)
	rec := &api.Command{
		ID: id, Env: env.ID, State: api.CommandReserved, CreatedAt: time.Now().UTC(),
		Purpose: purpose, Labels: labels, Argv: cs.Argv, Cwd: cs.Cwd, Output: cs.Output, Dir: dir,
		Tier: env.Tier, Launcher: records.ToAPI(self), LeaderState: api.PhasePending, TreeState: api.PhasePending,
		WorkloadKind: cs.Workload, Admission: l.decision, Timeout: api.Duration(cs.Timeout),
		CleanupErrors: []string{},
	}
	if rec.Launcher != nil {
		rec.Launcher.BootID = boot
	}
	rec.Session = cs.Session
	if cs.Output != api.OutputInherit {
		rec.StdoutPath = filepath.Join(dir, "stdout")
		rec.StderrPath = filepath.Join(dir, "stderr")
	}
	if env.CgroupPath != "" {
		rec.CgroupPath = filepath.Join(env.CgroupPath, cgCommands, id)
	}
	if env.Limits != nil && lh == nil {
		if g := evidence.LimitGroup(env); g != nil {
			l.lg = g
		}
	}
	l.rec = rec
	l.apply()
	add := func(kind, target string) {
		in := &registry.Intent{EnvID: env.ID, CommandID: id, Kind: kind, Target: target}
		l.intents = append(l.intents, in)
		b.AddIntent(in)
	}
	b.InsertCommand(rec)
	add(registry.KindDir, dir)
	if rec.CgroupPath != "" {
		add(registry.KindCgroup, rec.CgroupPath)
	}
	// The command's own v1 memory group (per-command OOM evidence).
	if l.lg != nil {
		for _, d := range l.lg.CommandGroupDirs(id) {
			add(registry.KindCgroupV1, d)
		}
	} else if lh != nil {
		if s := lh.For(limits.Memory); s.Mechanism == limits.Cgroup1 && s.Dir != "" {
			add(registry.KindCgroupV1, filepath.Join(s.Dir, env.ID, id))
		}
	}
}

// resolve fixes the command's environment variables, program and working
// directory as the workload will see them: inside the view, through the
// keeper's root.
func (l *launch) resolve(env *api.Env) error {
	e, cs := l.e, l.cs
	envv, policy, note, keys, err := launchenv.CommandEnv(context.Background(), e.hostShellCacheDir(), env.Spec, launchenv.CommandSpec{Env: cs.Env, EnvSet: cs.EnvSet, EnvPolicy: cs.EnvPolicy})
	if err != nil {
		return err
	}
	l.envv = envv
	l.policy, l.note, l.keys = policy, note, keys
	if env.Keeper != nil {
		r, err := provision.KeeperRoot(env.Keeper)
		if errors.Is(err, linux.ErrNoProcess) || errors.Is(err, linux.ErrIdentityMismatch) {
			return fmt.Errorf("environment %s: its keeper is gone (%v); new commands are refused (stop it and create a new one): %w", env.ID, err, api.ErrEnvNotActive)
		}
		if err != nil {
			return fmt.Errorf("environment %s: its view can't be entered: %v: %w", env.ID, err, api.ErrEnvNotActive)
		}
		l.view, l.keeperPID, l.keeperStart = &launchenv.ViewRoot{Root: r}, env.Keeper.PID, env.Keeper.StartTime
		defer func() { l.view.Close(); l.view = nil }()
	}
	if l.view != nil {
		if l.path, err = l.view.LookPath(cs.Argv[0], envv); err != nil {
			return err
		}
	} else if l.path, err = launchenv.LookPath(cs.Argv[0], envv); err != nil {
		return err
	}
	cwd := cs.Cwd
	if cwd != "" {
		if !filepath.IsAbs(cwd) {
			abs, err := filepath.Abs(cwd)
			if err != nil {
				return fmt.Errorf("working directory %s: %v: %w", cwd, err, api.ErrInvalid)
			}
			cwd = abs
		}
		ok := false
		if l.view != nil {
			ok = l.view.IsDir(cwd)
		} else if st, err := os.Stat(cwd); err == nil && st.IsDir() {
			ok = true
		}
		if !ok {
			where := ""
			if l.view != nil {
				where = " in the environment's view"
			}
			return fmt.Errorf("working directory %s does not exist%s or is not a directory: %w", cwd, where, api.ErrInvalid)
		}
	} else if wd, err := os.Getwd(); err == nil {
		cwd = wd
		if l.view != nil && !l.view.IsDir(cwd) {
			cwd = "/"
		}
	}
	l.cwd = cwd
	l.apply()
	if env.DeadlineMono > 0 {
		if boot, _ := linux.BootID(); env.BootID == boot {
			l.deadlineMono = env.DeadlineMono
		}
	}
	return nil
}

// apply copies what resolve found into the record (when it exists: a run
// reserves before it resolves, an exec resolves first).
func (l *launch) apply() {
	if l.rec == nil || l.cwd == "" {
		return
	}
	l.rec.EnvPolicy, l.rec.EnvPolicyNote, l.rec.EnvKeys, l.rec.Cwd = l.policy, l.note, l.keys, l.cwd
}

// prepare makes the command's directory, files and cgroups and starts its
// guardian at the gate.
func (l *launch) prepare(ctx context.Context, env *api.Env, lg *limits.Group) error {
	rec := l.rec
	if lg != nil {
		l.lg = lg
	}
	if err := os.Mkdir(rec.Dir, 0o700); err != nil {
		return fmt.Errorf("creating command directory: %w", err)
	}
	dirf, err := safefs.OpenPathDir(rec.Dir)
	if err != nil {
		return fmt.Errorf("opening command directory: %w", err)
	}
	l.opened = append(l.opened, dirf)
	ss := supervise.StartSpec{Dir: dirf}
	if err := l.outputs(&ss, func(name string, flag int) (*os.File, error) {
		return os.OpenFile(filepath.Join(rec.Dir, name), os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW|syscall.O_CLOEXEC|flag, 0o600)
	}); err != nil {
		return err
	}
	if err := l.commandGroups(env, &ss); err != nil {
		return err
	}
	return l.startGuardian(env, ss, l.lg != nil)
}

// outputs makes the receipt and, unless output is inherited, the stdout
// and stderr files through open, and fills ss with them.
func (l *launch) outputs(ss *supervise.StartSpec, open func(name string, flag int) (*os.File, error)) error {
	rec, cs := l.rec, l.cs
	create := func(name string, flag int) (*os.File, error) {
		f, err := open(name, flag)
		if err == nil {
			l.opened = append(l.opened, f)
			l.files = append(l.files, namedFile{f, name})
		}
		return f, err
	}
	receipt, err := create("receipt", os.O_RDWR)
	if err != nil {
		return fmt.Errorf("creating receipt: %w", err)
	}
	// The receipt is rewritten in place as facts arrive: its blocks are
	// allocated now, so a full filesystem can't cut it later.
	_ = safefs.Preallocate(receipt, 4096)
	rst, err := safefs.IDOf(receipt)
	if err != nil {
		return fmt.Errorf("stat receipt: %w", err)
	}
	rec.ProofDev, rec.ProofIno = rst.Dev, rst.Ino
	ss.Exe, ss.Receipt, ss.Setsid = l.e.opts.Exe, receipt, !cs.Foreground
	switch cs.Output {
	case api.OutputInherit:
		ss.Stdin, ss.Stdout, ss.Stderr = cs.Stdin, fileOr(cs.Stdout, os.Stdout), fileOr(cs.Stderr, os.Stderr)
	default:
		if ss.Stdout, err = create("stdout", os.O_WRONLY|os.O_APPEND); err != nil {
			return fmt.Errorf("creating stdout file: %w", err)
		}
		if ss.Stderr, err = create("stderr", os.O_WRONLY|os.O_APPEND); err != nil {
			return fmt.Errorf("creating stderr file: %w", err)
		}
		ss.Stdin = cs.Stdin
		ss.Forward = cs.Output == api.OutputPipe
	}
	return nil
}

// guardianGroup names the environment's guardians group in ss (the
// guardian is cloned into it) and what the release needs of the cgroup
// mount.
func (l *launch) guardianGroup(env *api.Env, ss *supervise.StartSpec) {
	if l.rec.CgroupPath == "" {
		return
	}
	l.gcg = filepath.Join(env.CgroupPath, cgGuardians)
	ss.GuardianCgroup = l.gcg
	if m, err := cgroup.FindMount(); err == nil {
		l.mount = m.Path
	}
}

// commandGroups makes the command's own cgroup and v1 limit groups (ss
// nil: the guardian is already started).
func (l *launch) commandGroups(env *api.Env, ss *supervise.StartSpec) error {
	rec := l.rec
	if rec.CgroupPath != "" {
		g, err := cgroup.Create(rec.CgroupPath)
		if err != nil {
			return fmt.Errorf("creating the command's cgroup: %w", err)
		}
		rec.CgroupInode, _ = g.Inode()
		l.wlPath = rec.CgroupPath
		if ss != nil {
			l.guardianGroup(env, ss)
		}
	}
	if l.lg != nil {
		dirs, err := l.lg.CommandGroups(rec.ID)
		if err != nil {
			return fmt.Errorf("creating the command's limit groups: %w", err)
		}
		l.v1join = dirs
		zero := uint64(0)
		rec.OOMBaseline = &zero
	}
	return nil
}

// startGuardian starts the guardian at its gate (join: and places it in
// the v1 limit groups) and records its identity in the record, not yet
// committed.
func (l *launch) startGuardian(env *api.Env, ss supervise.StartSpec, join bool) error {
	rec := l.rec
	g, err := supervise.Start(ss)
	if err != nil {
		return err
	}
	l.g = g
	if join {
		if err := l.joinLimits(); err != nil {
			return err
		}
	}
	fault.Point(fault.GuardianStarted)
	rec.Guardian = records.ToAPI(g.ID)
	rec.State = api.CommandRunning
	now := time.Now().UTC()
	rec.StartedAt = &now
	rec.LimitsNote = cmp.Or(evidence.Unenforced(env), rec.LimitsNote)
	return nil
}

// joinLimits: cgroup v1 has no clone-into, so the gated guardian joins
// the environment's limit groups before anything runs; its workload
// inherits them (and joins its own memory group).
func (l *launch) joinLimits() error {
	if err := l.lg.Join(l.g.ID.PID); err != nil {
		return fmt.Errorf("placing the command in its limit groups: %w", err)
	}
	return nil
}

// namedFile is a file the launch made, by its name in the command's
// directory.
type namedFile struct {
	f    *os.File
	name string
}

// noEarlyLaunch turns the early start off (tests of the other path).
var noEarlyLaunch = false

// early starts the guardian before the reservation commits, so that the
// reservation also registers it (decision 56): the receipt and output
// files are unnamed (O_TMPFILE) in the environment's commands directory
// and the guardian waits at its gate in the environment's guardians group.
// A crash before the commit leaves nothing: the files have no name and the
// guardian exits at EOF on its gate. It reports false, having made
// nothing, where the store's filesystem can't make unnamed files.
func (l *launch) early(env *api.Env) (bool, error) {
	if noEarlyLaunch {
		return false, nil
	}
	parent, err := safefs.OpenPathDir(filepath.Join(env.RunDir, "commands"))
	if err != nil {
		return false, fmt.Errorf("opening the environment's commands directory: %w", err)
	}
	first, err := safefs.OpenUnnamed(parent, "receipt", os.O_RDWR)
	if err != nil {
		parent.Close()
		return false, nil
	}
	l.opened = append(l.opened, parent)
	ss := supervise.StartSpec{Parent: parent}
	err = l.outputs(&ss, func(name string, flag int) (*os.File, error) {
		if first != nil {
			f := first
			first = nil
			return f, nil
		}
		return safefs.OpenUnnamed(parent, name, flag)
	})
	if err == nil {
		l.guardianGroup(env, &ss)
		if l.lg != nil {
			zero := uint64(0)
			l.rec.OOMBaseline = &zero
		}
		err = l.startGuardian(env, ss, false)
	}
	if err != nil {
		l.abortGuardian()
		return true, err
	}
	return true, nil
}

// place makes, after the reservation that registered the guardian, what
// the early start left for later: the command's directory with its files
// named in it, its cgroup and its limit groups.
func (l *launch) place(env *api.Env) error {
	rec := l.rec
	if err := os.Mkdir(rec.Dir, 0o700); err != nil {
		return fmt.Errorf("creating command directory: %w", err)
	}
	dir, err := safefs.OpenPathDir(rec.Dir)
	if err != nil {
		return fmt.Errorf("opening command directory: %w", err)
	}
	defer dir.Close()
	// The receipt is named last: a named receipt says every file is
	// named, and a receipt without a name that the guardian's release
	// never came (decide.Evidence.Unnamed).
	name := func(nf namedFile) error {
		if err := safefs.LinkUnnamed(nf.f, dir, nf.name); err != nil {
			return fmt.Errorf("naming the command's %s file: %w", nf.name, &os.PathError{Op: "link", Path: filepath.Join(rec.Dir, nf.name), Err: err})
		}
		return nil
	}
	var receipt *namedFile
	for i, nf := range l.files {
		if nf.name == "receipt" {
			receipt = &l.files[i]
		} else if err := name(nf); err != nil {
			return err
		}
	}
	if receipt != nil {
		if err := name(*receipt); err != nil {
			return err
		}
	}
	if err := l.commandGroups(env, nil); err != nil {
		return err
	}
	if l.lg != nil {
		return l.joinLimits()
	}
	return nil
}

// register adds the guardian's registration to b: the record with its
// identity, the intents' identities, and the launch gate's condition (the
// environment still takes commands).
func (l *launch) register(b *registry.Batch, env *api.Env) {
	boot, _ := linux.BootID()
	b.RequireEnv(env.ID, []api.EnvState{api.EnvActive}, boot, linux.MonotonicNow())
	old := *l.rec
	old.State, old.Rev = api.CommandReserved, 1
	b.UpdateCommand(&old, l.rec)
	records.SettleAll(b, l.intents, nil)
}

// release opens the gate and starts watching the guardian.
func (l *launch) release(ctx context.Context, env *api.Env) (*Running, error) {
	fault.Point(fault.GuardianRegistered)
	for _, f := range l.opened {
		f.Close()
	}
	l.opened = nil
	cs, rec := l.cs, l.rec
	cfg := &supervise.Config{
		CommandID: rec.ID, EnvID: env.ID, Argv: cs.Argv, Path: l.path, Env: l.envv, Cwd: rec.Cwd,
		Output: string(cs.Output), WorkloadCgroup: l.wlPath, CgroupMount: l.mount, GuardiansCgroup: l.gcg,
		V1Join: l.v1join, Grace: env.Grace.D(), Idle: env.IdleTimeout.D(), OwnerExit: env.OwnerExit,
		Foreground: cs.Foreground, DeadlineMono: l.deadlineMono, AutoStop: cs.AutoStop,
		Session: cs.Session, TTYCols: cs.TTYCols, TTYRows: cs.TTYRows,
	}
	cfg.OwnerExit = cmp.Or(cs.OwnerExit, cfg.OwnerExit)
	if l.deadlineMono > 0 {
		cfg.RunDir = env.RunDir // a moved deadline (Extend) is there
	}
	if l.keeperPID > 0 {
		cfg.ViewPID, cfg.ViewStart = l.keeperPID, l.keeperStart
	}
	if l.lg != nil {
		cfg.OOMFile = l.lg.CommandOOMFile(rec.ID, rec.CgroupPath)
	}
	if cs.Timeout > 0 {
		cfg.TimeoutMono = linux.MonotonicNow() + cs.Timeout
		rec.TimeoutMono = cfg.TimeoutMono
	}
	r := newRunning(l, env)
	if err := l.g.Release(cfg); err != nil {
		// The guardian is registered and started nothing: it exits at
		// EOF, or it is gone already because a stop reached it at its
		// gate. Its empty receipt proves that; the record says so now.
		l.g.Abort()
		cause := fmt.Errorf("releasing the command: %w", err)
		if errors.Is(err, syscall.EPIPE) {
			cause = fmt.Errorf("releasing the command: its guardian ended at the launch gate before the release (a signal ended it there), so nothing of the command ran: %w", err)
		}
		if r.unreleased(cause) {
			// A stop came first: the command's end, reported as such.
			return r, nil
		}
		return nil, cause
	}
	fault.Point(fault.Released)
	go r.watch()
	// Return once the guardian reported the workload's start (its
	// identity is then in the record's view) or its failure; a cancelled
	// ctx returns at once, the command runs on.
	select {
	case <-r.started:
	case <-ctx.Done():
	}
	return r, nil
}

// abortGuardian revokes an unreleased gate: the guardian exits without
// starting anything.
func (l *launch) abortGuardian() {
	if l == nil {
		return
	}
	if l.g != nil {
		l.g.Abort()
		l.g = nil
	}
	for _, f := range l.opened {
		f.Close()
	}
	l.opened = nil
}

// failInBatch adds the failed record of a launch aborted before release.
func (l *launch) failInBatch(ctx context.Context, b *registry.Batch, cause error) {
	cur, err := l.e.reg.Command(ctx, l.rec.ID)
	if err != nil {
		return
	}
	b.UpdateCommand(cur, neverReleased(cur, cause, nil))
}

// neverReleased is the failed record of a launch that never got past its
// gate: nothing of it ran.
func neverReleased(cur *api.Command, cause error, cleanup []string) *api.Command {
	next := *cur
	next.State = api.CommandFailed
	next.Error = cause.Error()
	next.LeaderState = api.PhaseUnknown
	next.TreeState = api.PhaseExited
	next.TreeEvidence = "never released"
	next.CleanupErrors = append(append([]string{}, cur.CleanupErrors...), cleanup...)
	return &next
}

// abort settles a command whose launch failed before release: its cgroups
// are removed and its record says why. Its directory stays as evidence.
func (l *launch) abort(cause error) error {
	ctx := context.Background()
	l.abortGuardian()
	var cleanup []string
	if l.rec.CgroupPath != "" {
		if err := cgroup.Open(l.rec.CgroupPath).Remove(); err != nil && !errors.Is(err, os.ErrNotExist) {
			cleanup = append(cleanup, err.Error())
		}
	}
	if l.lg != nil {
		if err := l.lg.RemoveCommand(ctx, l.rec.ID); err != nil {
			cleanup = append(cleanup, err.Error())
		}
	}
	for try := 0; try < 5; try++ {
		cur, err := l.e.reg.Command(ctx, l.rec.ID)
		if err != nil {
			break
		}
		next := neverReleased(cur, cause, cleanup)
		var b registry.Batch
		b.UpdateCommand(cur, next)
		override := map[int64]registry.Fact{}
		for _, in := range l.intents {
			if in.Kind == registry.KindDir {
				if _, err := os.Lstat(in.Target); err == nil {
					override[in.ID] = registry.Fact{Exists: true, Identity: records.PathIdentity(in.Target)}
				}
			}
		}
		records.SettleAll(&b, l.intents, override)
		if err := l.e.reg.Commit(ctx, &b); err == nil || !errors.Is(err, registry.ErrConflict) {
			break
		}
	}
	if cur, err := l.e.reg.Command(ctx, l.rec.ID); err == nil {
		records.WriteCommandRecord(cur)
	}
	return cause
}

func fileOr(w io.Writer, def *os.File) *os.File {
	if f, ok := w.(*os.File); ok && f != nil {
		return f
	}
	return def
}

// Start launches a command in an existing environment: the guardian
// started at its gate with unnamed files, one commit that reserves the
// command and registers the guardian, the command's directory, files and
// cgroups made, the release (decision 56). Where the store can't make
// unnamed files it is a reservation commit, the guardian started, a
// registration commit and the release. Nothing of the workload runs before its identity is
// registered; a failure before release leaves no process and a settled
// ledger. The result is recorded by the returned Running (the second
// commit, or the third).
func (e *Engine) Start(ctx context.Context, envID string, cs *CommandSpec) (*Running, error) {
	if err := e.checkOpen(); err != nil {
		return nil, err
	}
	if cs.AutoStop {
		return nil, fmt.Errorf("AutoStop applies to an environment's first command only (Create): %w", api.ErrInvalid)
	}
	env, err := e.reg.Env(ctx, envID)
	if err != nil {
		return nil, err
	}
	if env.State != api.EnvActive {
		return nil, fmt.Errorf("environment %s is %s; create a new one: %w", env.ID, env.State, api.ErrEnvNotActive)
	}
	l, err := e.newLaunch(ctx, cs)
	if err != nil {
		return nil, err
	}
	defer l.releaseAdmission()
	if err := l.resolve(env); err != nil {
		return nil, err
	}
	fault.Point(fault.LaunchResolved)
	boot, _ := linux.BootID()
	var b registry.Batch
	b.RequireEnv(env.ID, []api.EnvState{api.EnvActive}, boot, linux.MonotonicNow())
	l.reserve(&b, env, nil)
	if early, err := l.early(env); err != nil {
		return nil, e.stoppedMeanwhile(ctx, env.ID, err)
	} else if early {
		// One commit reserves the command and registers its guardian.
		if err := e.reg.Commit(ctx, &b); err != nil {
			l.abortGuardian()
			if errors.Is(err, api.ErrEnvNotActive) {
				return nil, fmt.Errorf("the launch gate is revoked, nothing of the command ran: %w", err)
			}
			return nil, fmt.Errorf("registering the command: %w", err)
		}
		l.reserved()
		if err := l.place(env); err != nil {
			return nil, e.stoppedMeanwhile(ctx, env.ID, l.abort(err))
		}
		r, err := l.release(ctx, env)
		return r, e.stoppedMeanwhile(ctx, env.ID, err)
	}
	if err := e.reg.Commit(ctx, &b); err != nil {
		return nil, fmt.Errorf("registering the command: %w", err)
	}
	l.reserved()
	if err := l.prepare(ctx, env, evidence.LimitGroup(env)); err != nil {
		return nil, e.stoppedMeanwhile(ctx, env.ID, l.abort(err))
	}
	var b2 registry.Batch
	l.register(&b2, env)
	if err := e.reg.Commit(ctx, &b2); err != nil {
		// Not registered: revoke the gate; nothing ran.
		if errors.Is(err, api.ErrEnvNotActive) {
			return nil, l.abort(fmt.Errorf("the launch gate is revoked, nothing of the command ran: %w", err))
		}
		return nil, l.abort(fmt.Errorf("registering the guardian: %w", err))
	}
	r, err := l.release(ctx, env)
	return r, e.stoppedMeanwhile(ctx, env.ID, err)
}

// stoppedMeanwhile: an environment stopped by someone else during a launch
// removes the groups the launch was placing its command in, or revokes its
// gate. The launch's error is then ErrEnvNotActive (exit 122), not an
// internal error (the soak saw ENOENT on the guardians group and on the
// command's cgroup, and a gate closed under the release).
func (e *Engine) stoppedMeanwhile(ctx context.Context, envID string, err error) error {
	if err == nil || errors.Is(err, api.ErrEnvNotActive) {
		return err
	}
	// A stopper keeps its decision before it kills anything, and records
	// the state in parallel with the kill: either says a stop came.
	if cur, rerr := e.reg.Env(context.WithoutCancel(ctx), envID); rerr == nil &&
		(cur.State != api.EnvActive || records.ReadDecision(filepath.Join(cur.RunDir, "stop-decision")) != "") {
		return fmt.Errorf("environment %s was stopped during the launch (%v); create a new one: %w", envID, err, api.ErrEnvNotActive)
	}
	return err
}

// checkSession refuses a session the guardian can't hold: a terminal or a
// stdin pipe needs the output files (the session's log) and no stdin of
// the caller's.
func checkSession(cs *CommandSpec) error {
	switch cs.Session {
	case "":
		return nil
	case "tty", "stdin":
	default:
		return fmt.Errorf("session %q: use tty or stdin: %w", cs.Session, api.ErrInvalid)
	}
	if cs.Output == api.OutputInherit || (cs.Session == "tty" && cs.Output != api.OutputFiles) {
		return fmt.Errorf("a %s session writes its output to the command's log: use output files, not %s: %w", cs.Session, cs.Output, api.ErrInvalid)
	}
	if cs.Stdin != nil || cs.Foreground {
		return fmt.Errorf("a %s session is the command's input: give no stdin and no foreground: %w", cs.Session, api.ErrInvalid)
	}
	if cs.Session == "tty" && (cs.TTYCols == 0) != (cs.TTYRows == 0) {
		return fmt.Errorf("terminal size %dx%d: give both columns and rows: %w", cs.TTYCols, cs.TTYRows, api.ErrInvalid)
	}
	return nil
}
