package supervise

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/linux"
)

// KeeperMode is the hidden argv[1] that selects the keeper (keeper.c).
const KeeperMode = "__hostfork_keeper"

// The keeper's descriptors.
//
// kfdConfig (launcher → keeper) carries one message framed like the
// guardian's release (its length, then "key=value\0" strings): env_id,
// owner_exit (stop | detach), deadline_mono_ns and grace_ns (decimal
// nanoseconds), files (how many trees' descriptors follow kfdRunDir),
// userns (1: a rootless view), propagation (slave | private), cgroup_mount,
// commands_cgroup and guardians_cgroup, then the view's operations in
// order, each "op=KIND" followed by six strings: its Target, Source,
// FSType, Data, Flags and Slot (see KeeperOp; decimal numbers). The
// keeper makes a new mount namespace, makes it a slave or private, applies
// the operations, and answers on kfdReady with one line: "ok" or
// "error MESSAGE".
//
// kfdOwner (launcher → keeper) is the owner channel. The creator writes
// "committed [COMMANDS [GUARDIANS]]\n" once the registry holds the keeper's
// identity (the groups, when known only then: a systemd scope's). EOF
// before that line is an aborted creation: the keeper exits at once. EOF
// after it is owner exit: with owner_exit "stop" the keeper stops the
// environment's commands (reason "owner-exit") and exits.
//
// kfdRunDir is the environment's run directory (O_PATH), opened by the
// launcher on the host's mounts before the view can cover it: the keeper
// reads a moved deadline (DeadlineFile) there. It is /dev/null when there
// is none, never an empty slot that a later descriptor would take.
// The trees' descriptors follow it (KeeperFirstFile).
//
// Signals: a plain SIGTERM is an orderly environment stop (its commands are
// handled by the stopper): the keeper exits. A queued SIGTERM (StopValue)
// asks the keeper to stop the commands itself, with that reason and grace,
// then exit. At deadline − grace the keeper stops the commands with reason
// "deadline". The keeper stops commands by sending each guardian in the
// guardians group a queued stop, then, after the grace, killing what is
// left of the commands group with the tree-stop mechanism.
const (
	kfdConfig = 3
	kfdReady  = 4
	kfdOwner  = 5
	kfdRunDir = 6 // the run directory (RunDir, opened here); /dev/null when there is none
)

// KeeperOp is one primitive step of a view, applied by the keeper in its
// new mount namespace. Kinds: "mount" (mount(2) of Source on Target with
// FSType, Flags and Data), "remount" (a bind remount of Target with
// Flags), "rdonly" (make Target and everything below it read-only),
// "rdonly-one" (make the one mount at Target read-only),
// "tmpfs" (a private tmpfs on Target with Target's mode), "mkdirs" (create
// Target and its parents), "capture" (clone the mount tree at Target into
// Slot, before anything covers it), "mkpoint" (create Target like the tree
// in Slot if it is missing), "move" (attach the tree in Slot at Target).
type KeeperOp struct {
	Kind   string
	Source string
	Target string
	FSType string
	Flags  uintptr
	Data   string
	Slot   int
}

// KeeperSpec says how to start a keeper.
type KeeperSpec struct {
	Exe string // the program re-executed as the keeper (hostfork's own binary)
	// Cgroup is the cgroup2 directory the keeper is cloned into ("" none).
	Cgroup    string
	Log       *os.File
	EnvID     string
	OwnerExit string
	// Slave makes the view a slave of the host's mounts (host unmounts and
	// new mounts reach it where the host's mounts are shared).
	Slave        bool
	DeadlineMono time.Duration
	Grace        time.Duration
	// RunDir is the environment's run directory: a moved deadline
	// (DeadlineFile) there replaces DeadlineMono.
	RunDir          string
	CgroupMount     string
	CommandsCgroup  string
	GuardiansCgroup string
	Ops             []KeeperOp
	// Files are handed to the keeper as descriptors KeeperFirstFile,
	// KeeperFirstFile+1, …: the trees, opened and verified by the launcher,
	// which Ops name as /proc/self/fd/N. The keeper closes them once the
	// view is built.
	Files []*os.File
}

// KeeperFirstFile is the keeper's descriptor of KeeperSpec.Files[0].
const KeeperFirstFile = 7

// Keeper is the launcher's handle on a started keeper.
type Keeper struct {
	ID    linux.Identity
	proc  *child
	owner *os.File
}

func encodeKeeper(s *KeeperSpec) ([]byte, error) {
	var b bytes.Buffer
	var bad error
	str := func(v string) {
		if strings.IndexByte(v, 0) >= 0 && bad == nil {
			bad = fmt.Errorf("keeper: %q contains a NUL byte", v)
		}
		b.WriteString(v)
		b.WriteByte(0)
	}
	put := func(k, v string) { str(k + "=" + v) }
	put("env_id", s.EnvID)
	put("owner_exit", s.OwnerExit)
	if s.DeadlineMono > 0 {
		put("deadline_mono_ns", strconv.FormatInt(int64(s.DeadlineMono), 10))
	}
	put("grace_ns", strconv.FormatInt(int64(s.Grace), 10))
	if len(s.Files) > 0 {
		put("files", strconv.Itoa(len(s.Files)))
	}
	if RootlessView() {
		put("userns", "1")
	}
	if s.Slave {
		put("propagation", "slave")
	} else {
		put("propagation", "private")
	}
	for k, v := range map[string]string{"cgroup_mount": s.CgroupMount, "commands_cgroup": s.CommandsCgroup, "guardians_cgroup": s.GuardiansCgroup} {
		if len(v) > maxPath {
			return nil, fmt.Errorf("keeper: %s longer than %d bytes", k, maxPath)
		}
		if v != "" {
			put(k, v)
		}
	}
	for _, o := range s.Ops {
		if !strings.HasPrefix(o.Target, "/") {
			return nil, fmt.Errorf("keeper: %s target %q is not absolute", o.Kind, o.Target)
		}
		switch o.Kind {
		case "mount", "remount", "capture", "mkpoint", "move", "rdonly", "rdonly-one", "tmpfs", "mkdirs":
		default:
			return nil, fmt.Errorf("keeper: unknown operation %q", o.Kind)
		}
		if o.Slot < 0 || o.Slot >= 64 {
			return nil, fmt.Errorf("keeper: slot %d out of range", o.Slot)
		}
		// The kind, then always six strings (keeper.c, parse_config).
		put("op", o.Kind)
		for _, v := range []string{o.Target, o.Source, o.FSType, o.Data, strconv.FormatUint(uint64(o.Flags), 10), strconv.Itoa(o.Slot)} {
			str(v)
		}
	}
	if bad != nil {
		return nil, bad
	}
	if b.Len() > maxRelease {
		return nil, fmt.Errorf("keeper: the view takes %d bytes, more than %d", b.Len(), maxRelease)
	}
	return frameMsg(b.Bytes()), nil
}

// StartKeeper starts a keeper (in a new session, cloned into s.Cgroup when
// set), hands it its view, and waits until the view is applied. The
// returned keeper holds the owner channel; Commit it once its identity is
// recorded, then Detach or Close it by the owner-exit policy.
func StartKeeper(s *KeeperSpec) (*Keeper, error) {
	msg, err := encodeKeeper(s)
	if err != nil {
		return nil, err
	}
	return startKeeper(s, msg)
}

// startKeeper starts a keeper for s with msg as its configuration.
func startKeeper(s *KeeperSpec, msg []byte) (*Keeper, error) {
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		cfgR.Close()
		cfgW.Close()
		return nil, err
	}
	ownR, ownW, err := os.Pipe()
	if err != nil {
		cfgR.Close()
		cfgW.Close()
		readyR.Close()
		readyW.Close()
		return nil, err
	}
	closeAll := func() {
		for _, f := range []*os.File{cfgR, cfgW, readyR, readyW, ownR, ownW} {
			f.Close()
		}
	}
	nullR, nullW, err := devNulls()
	if err != nil {
		closeAll()
		return nil, err
	}
	defer nullR.Close()
	defer nullW.Close()
	logf := s.Log
	if logf == nil {
		logf = nullW
	}
	// The run directory, or /dev/null when there is none (or it can't be
	// opened): never an empty slot, which the keeper's next descriptor
	// (its timerfd, a captured tree) would take, and be read as the run
	// directory (keeper.c, arm_deadline).
	runDir := nullR
	if s.RunDir != "" {
		if d, err := os.OpenFile(s.RunDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err == nil {
			defer d.Close()
			runDir = d
		}
	}
	sp := spawnSpec{
		path:     s.Exe,
		args:     []string{"hostfork-keeper", KeeperMode},
		files:    append([]*os.File{nullR, nullW, logf, cfgR, readyW, ownR, runDir}, s.Files...),
		setsid:   true,
		cgroupFD: -1,
	}
	if s.Cgroup != "" {
		fd, err := unix.Open(s.Cgroup, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			closeAll()
			return nil, &os.PathError{Op: "open", Path: s.Cgroup, Err: err}
		}
		defer unix.Close(fd)
		sp.cgroupFD = fd
	}
	c, err := spawn(sp)
	cfgR.Close()
	readyW.Close()
	ownR.Close()
	if err != nil {
		cfgW.Close()
		readyR.Close()
		ownW.Close()
		return nil, fmt.Errorf("starting keeper: %w", err)
	}
	k := &Keeper{proc: c, owner: ownW}
	// Our unreaped child: its PID can't be reused before we reap it.
	k.ID, _ = linux.IdentityOf(c.pid)
	_, werr := cfgW.Write(msg)
	ready := bufio.NewReader(readyR)
	line, rerr := ready.ReadString('\n')
	line = strings.TrimSuffix(line, "\n")
	if line == "userns" {
		// A rootless keeper made its user namespace: map its ids from
		// here, then let it go on.
		if err := mapIDs(c.pid); err != nil {
			cfgW.Close()
			readyR.Close()
			ownW.Close()
			c.kill()
			_, _ = c.wait()
			return nil, fmt.Errorf("building the view: mapping ids into its user namespace: %w", err)
		}
		_, werr = cfgW.Write([]byte{'m'})
		line, rerr = ready.ReadString('\n')
		line = strings.TrimSuffix(line, "\n")
	}
	cfgW.Close()
	readyR.Close()
	if rerr != nil || line != "ok" {
		ownW.Close()
		_, _ = c.wait()
		if m, ok := strings.CutPrefix(line, "error "); ok {
			if why := linux.UsernsBlockedReason(); strings.HasPrefix(m, "a user namespace") && why != "" {
				m += "; " + why
			}
			return nil, fmt.Errorf("building the view: %s", m)
		}
		if werr != nil {
			return nil, fmt.Errorf("keeper did not take its view: %v", werr)
		}
		return nil, fmt.Errorf("keeper did not report ready (%v); see keeper.log", rerr)
	}
	// The keeper is not waited for beyond this point: it outlives a
	// detached creator. Reap it in the background while we live.
	go func() { _, _ = c.wait() }()
	return k, nil
}

// Commit tells the keeper that its identity is recorded (committed); until
// then, losing the owner channel makes it exit at once. The groups, when
// not empty, name the environment's commands and guardians groups if they
// were not known when the keeper started.
func (k *Keeper) Commit(commandsCgroup, guardiansCgroup string) error {
	if len(commandsCgroup) > maxPath || len(guardiansCgroup) > maxPath || strings.ContainsAny(commandsCgroup+guardiansCgroup, " \t\n\v\f\r") {
		return fmt.Errorf("keeper: a group path is longer than %d bytes or holds white space", maxPath)
	}
	line := "committed"
	if commandsCgroup != "" {
		line += " " + commandsCgroup
		if guardiansCgroup != "" {
			line += " " + guardiansCgroup
		}
	}
	_, err := k.owner.Write([]byte(line + "\n"))
	return err
}

// Detach closes the owner channel: with owner-exit "stop" this stops the
// environment's commands; with "detach" the keeper keeps holding the view.
func (k *Keeper) Detach() { k.owner.Close() }

// Kill ends a keeper that was never committed (an aborted creation).
func (k *Keeper) Kill() {
	k.owner.Close()
	k.proc.kill()
}

// StopKeeper ends a keeper: SIGTERM through a verified pidfd, a bounded
// wait, then SIGKILL.
func StopKeeper(ctx context.Context, id linux.Identity) {
	p, err := linux.OpenVerified(id)
	if err != nil {
		return
	}
	defer p.Close()
	_ = p.Signal(syscall.SIGTERM)
	if p.WaitExit(ctx, 2*time.Second) {
		return
	}
	_ = p.Signal(syscall.SIGKILL)
}
