package view

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime/debug"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/linux"
)

// KeeperMode is the hidden argv[1] that selects the keeper.
const KeeperMode = "__hostfork_keeper"

const (
	kfdConfig = 3 // launcher → keeper: one JSON KeeperConfig
	kfdReady  = 4 // keeper → launcher: one JSON line {"ok":true} or {"error":...}
	kfdOwner  = 5 // owner channel: EOF = the creating process is gone
)

// KeeperConfig is what a keeper is started with.
type KeeperConfig struct {
	EnvID string `json:"env_id"`
	Ops   []Op   `json:"ops"`
	// CommandsCgroup is the environment's commands/ group (cgroup2 tier):
	// on owner-exit stop or deadline the keeper kills each command's
	// workload group below it.
	CommandsCgroup string        `json:"commands_cgroup,omitempty"`
	OwnerExit      string        `json:"owner_exit"`
	DeadlineMono   time.Duration `json:"deadline_mono_ns,omitempty"`
	Grace          time.Duration `json:"grace_ns"`
}

type readyMsg struct {
	OK    bool   `json:"ok"`
	Error string `json:"error,omitempty"`
}

// KeeperMain is the keeper's entry point. It was started in a new mount
// namespace whose root Go's runtime already made recursively private.
func KeeperMain() int {
	debug.SetGCPercent(20)
	signal.Ignore(syscall.SIGPIPE, syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT)
	ready := os.NewFile(kfdReady, "ready")
	var cfg KeeperConfig
	if err := json.NewDecoder(os.NewFile(kfdConfig, "config")).Decode(&cfg); err != nil {
		_, _ = ready.Write(append(mustJSON(readyMsg{Error: "reading keeper config: " + err.Error()}), '\n'))
		return 125
	}
	// Make sure nothing propagates back to the host, whatever the parent
	// namespace's propagation was.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		_, _ = ready.Write(append(mustJSON(readyMsg{Error: "making the view private: " + err.Error()}), '\n'))
		return 125
	}
	if err := apply(cfg.Ops); err != nil {
		_, _ = ready.Write(append(mustJSON(readyMsg{Error: err.Error()}), '\n'))
		return 125
	}
	_, _ = ready.Write(append(mustJSON(readyMsg{OK: true}), '\n'))
	ready.Close()
	_ = os.Chdir("/")

	stop := make(chan string, 3)
	commands := make(chan string, 1)
	go func() {
		// The owner channel. The creator first writes "committed" once the
		// registry holds our identity; EOF before that is an aborted
		// creation (nothing must outlive it), EOF after it means the
		// creating process is gone.
		r := bufio.NewReader(os.NewFile(kfdOwner, "owner"))
		line, err := r.ReadString('\n')
		rest, ok := strings.CutPrefix(strings.TrimSuffix(line, "\n"), "committed")
		if err != nil || !ok {
			stop <- "aborted"
			return
		}
		if c := strings.TrimSpace(rest); c != "" {
			// Known only now (a systemd scope's delegated group).
			commands <- c
		}
		_, _ = r.ReadString('\n')
		stop <- "owner-exit"
	}()
	term := make(chan os.Signal, 1)
	signal.Notify(term, syscall.SIGTERM)
	var deadline <-chan time.Time
	if cfg.DeadlineMono > 0 {
		d := cfg.DeadlineMono - cfg.Grace - linux.MonotonicNow()
		if d < 0 {
			d = 0
		}
		deadline = time.After(d)
	}
	for {
		select {
		case c := <-commands:
			cfg.CommandsCgroup = c
		case <-term:
			// An orderly environment stop: commands are already handled.
			return 0
		case <-deadline:
			stopCommands(cfg, cfg.DeadlineMono-linux.MonotonicNow())
			return 0
		case why := <-stop:
			if why == "aborted" {
				stopCommands(cfg, 0)
				return 0
			}
			if why == "owner-exit" && cfg.OwnerExit != "stop" {
				continue // detached: keep holding the view
			}
			stopCommands(cfg, cfg.Grace)
			return 0
		}
	}
}

// stopCommands ends every command's workload in the environment: SIGTERM,
// the grace, then cgroup.kill. Guardians then reap and write receipts.
func stopCommands(cfg KeeperConfig, grace time.Duration) {
	if cfg.CommandsCgroup == "" {
		return
	}
	groups, _ := filepath.Glob(filepath.Join(cfg.CommandsCgroup, "*", "workload"))
	for _, g := range groups {
		b, _ := os.ReadFile(filepath.Join(g, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			var pid int
			fmt.Sscan(f, &pid)
			if fd, err := unix.PidfdOpen(pid, 0); err == nil {
				_ = unix.PidfdSendSignal(fd, unix.SIGTERM, nil, 0)
				unix.Close(fd)
			}
		}
	}
	end := time.Now().Add(grace)
	for time.Now().Before(end) && anyPopulated(groups) {
		time.Sleep(10 * time.Millisecond)
	}
	for _, g := range groups {
		_ = os.WriteFile(filepath.Join(g, "cgroup.kill"), []byte("1"), 0)
	}
}

func anyPopulated(groups []string) bool {
	for _, g := range groups {
		b, err := os.ReadFile(filepath.Join(g, "cgroup.events"))
		if err == nil && strings.Contains(string(b), "populated 1") {
			return true
		}
	}
	return false
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// Keeper is the launcher's handle on a started keeper.
type Keeper struct {
	ID    linux.Identity
	cmd   *exec.Cmd
	owner *os.File
}

// StartKeeper starts a keeper in a new private mount namespace (cloned
// into cgroupDir when set), hands it cfg, and waits until its view is
// applied. The returned keeper holds the owner channel; Detach or Close
// it according to the environment's owner-exit policy.
func StartKeeper(exe, cgroupDir string, log *os.File, cfg *KeeperConfig) (*Keeper, error) {
	cfgR, cfgW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	ownR, ownW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	cmd := &exec.Cmd{
		Path:       exe,
		Args:       []string{"hostfork-keeper", KeeperMode},
		Env:        []string{},
		ExtraFiles: []*os.File{cfgR, readyW, ownR},
		Stderr:     log,
		SysProcAttr: &syscall.SysProcAttr{
			Setsid:       true,
			Unshareflags: syscall.CLONE_NEWNS,
		},
	}
	if cgroupDir != "" {
		fd, err := unix.Open(cgroupDir, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			return nil, &os.PathError{Op: "open", Path: cgroupDir, Err: err}
		}
		defer unix.Close(fd)
		cmd.SysProcAttr.UseCgroupFD = true
		cmd.SysProcAttr.CgroupFD = fd
	}
	err = cmd.Start()
	cfgR.Close()
	readyW.Close()
	ownR.Close()
	if err != nil {
		cfgW.Close()
		readyR.Close()
		ownW.Close()
		return nil, fmt.Errorf("starting keeper: %w", err)
	}
	k := &Keeper{cmd: cmd, owner: ownW}
	k.ID, _ = linux.IdentityOf(cmd.Process.Pid)
	_ = json.NewEncoder(cfgW).Encode(cfg)
	cfgW.Close()
	var msg readyMsg
	line, rerr := bufio.NewReader(readyR).ReadBytes('\n')
	readyR.Close()
	if rerr == nil {
		rerr = json.Unmarshal(line, &msg)
	}
	if rerr != nil || !msg.OK {
		ownW.Close()
		_ = cmd.Wait()
		if msg.Error != "" {
			return nil, fmt.Errorf("building the view: %s", msg.Error)
		}
		return nil, fmt.Errorf("keeper did not report ready: %v", rerr)
	}
	// The keeper is not waited for by this process beyond this point: it
	// outlives a detached creator. Reap it in the background while we live.
	go func() { _ = cmd.Wait() }()
	return k, nil
}

// Commit tells the keeper that its identity is durably recorded; until
// then, losing the owner channel makes the keeper exit at once.
// commandsCgroup, when not empty, names the environment's commands/ group
// if it was not known when the keeper started.
func (k *Keeper) Commit(commandsCgroup string) error {
	_, err := k.owner.Write([]byte("committed " + commandsCgroup + "\n"))
	return err
}

// Detach closes the owner channel: with owner-exit "stop" this stops the
// environment's commands; with "detach" the keeper keeps holding the view.
func (k *Keeper) Detach() { k.owner.Close() }
