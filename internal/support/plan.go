package support

import (
	"cmp"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Mode selects the manager the integration is installed into.
type Mode string

const (
	// System installs into the system manager: /etc/systemd/system,
	// running as root.
	System Mode = "system"
	// User installs into the user's manager: ~/.config/systemd/user,
	// running as the user, while the user manager runs.
	User Mode = "user"
)

// Units are one store's unit names. The default store (Config.DefaultStore)
// keeps the plain names (hostfork-reap.service, ...); any other root gets
// its own, tagged with a hash of the root (hostfork-1a2b3c4d-reap.service),
// so two stores' installs never take each other's files.
type Units struct {
	ReapService     string `json:"reap_service"`
	ReapTimer       string `json:"reap_timer"`
	FinalizeService string `json:"finalize_service"`
	// ServeSocket listens on the store's API socket; its first connection
	// starts ServeService ('hostfork serve' with the inherited socket).
	ServeSocket  string `json:"serve_socket"`
	ServeService string `json:"serve_service"`
}

// UnitsFor names the units of the store at root.
func UnitsFor(root string, defaultStore bool) Units {
	prefix := "hostfork-"
	if !defaultStore {
		sum := sha256.Sum256([]byte(filepath.Clean(root)))
		prefix += hex.EncodeToString(sum[:4]) + "-"
	}
	return Units{
		ReapService: prefix + "reap.service", ReapTimer: prefix + "reap.timer",
		FinalizeService: prefix + "finalize@.service",
		ServeSocket:     prefix + "serve.socket", ServeService: prefix + "serve.service",
	}
}

// FormatVersion is the version of the unit layout written here; a change
// of what the units do bumps it (2: the API server's socket and service).
const FormatVersion = "2"

// SocketName is the API socket's name in the store root (what 'hostfork
// serve' listens on by default).
const SocketName = "api.sock"

// Marker keys in the [Unit] section of every file hostfork writes (systemd
// ignores keys that start with X-). uninstall removes only files that carry
// them.
const (
	keyFormat     = "X-Hostfork-Support"
	keyVersion    = "X-Hostfork-Version"
	keyExecutable = "X-Hostfork-Executable"
	keyRoot       = "X-Hostfork-Root"
)

// Sentinel errors; the CLI maps them to exit codes.
var (
	// ErrNoSystemd: no systemd manager for the selected mode; the plan
	// lists the alternatives.
	ErrNoSystemd = errors.New("no systemd manager")
	// ErrConflict: a file hostfork would write exists and is not
	// hostfork's, or is hostfork's for another store root.
	ErrConflict = errors.New("support units conflict")
	// ErrUnstableExecutable: the executable would not outlive this run
	// (deleted, or in Go's build cache).
	ErrUnstableExecutable = errors.New("hostfork's executable is not at a stable path")
	// ErrInvalid: a bad configuration (relative paths, unknown mode).
	ErrInvalid = errors.New("invalid support configuration")
)

// Config is what a plan is made from.
type Config struct {
	Mode Mode
	// Exe is the absolute, symlink-resolved path of the hostfork
	// executable the units run (see Executable).
	Exe string
	// Root is the absolute store root the units reap.
	Root string
	// Version identifies Exe's build; it is written into the units so that
	// status can tell a stale installation.
	Version string
	// UnitDir overrides where the units go (default: DefaultUnitDir).
	UnitDir string
	// UserName names the user, for --user lingering advice.
	UserName string
	// DefaultStore: Root is the mode's default store, whose units keep the
	// plain names (UnitsFor).
	DefaultStore bool
}

// Host is what Detect found about the selected manager.
type Host struct {
	// Systemd: a systemd manager for the mode is running.
	Systemd bool `json:"systemd"`
	// Reason says why there is none.
	Reason string `json:"reason,omitempty"`
	// Linger: for User mode, whether lingering is enabled (nil: unknown).
	Linger *bool `json:"linger,omitempty"`
}

// File is one unit file the plan writes.
type File struct {
	Unit string      `json:"unit"`
	Path string      `json:"path"`
	Mode os.FileMode `json:"-"`
	// ModeText is Mode in octal, for people reading the plan.
	ModeText string `json:"mode"`
	Content  string `json:"content"`
}

// Plan is exactly what install writes and runs, and what uninstall undoes.
type Plan struct {
	Mode       Mode   `json:"mode"`
	Root       string `json:"root"`
	Executable string `json:"executable"`
	Version    string `json:"version"`
	Systemd    bool   `json:"systemd"`
	// NoSystemd says why there is no manager, when there is none.
	NoSystemd string `json:"no_systemd,omitempty"`
	UnitDir   string `json:"unit_dir"`
	// Units are this store's unit names.
	Units Units  `json:"units"`
	Files []File `json:"files"`
	// Install are the commands install runs after writing the files (a
	// reload and a restart of a running server only when a file changed,
	// enabling only when the timer or the socket is not enabled and
	// active already).
	Install [][]string `json:"install_commands"`
	// Uninstall are the commands uninstall runs: disabling and stopping
	// first, then (after the files are removed) the reload.
	Uninstall [][]string `json:"uninstall_commands"`
	// Alternatives are what to use instead without systemd.
	Alternatives []string `json:"alternatives,omitempty"`
	Notes        []string `json:"notes"`
	// Never lists what support never does.
	Never []string `json:"never"`
}

// DefaultUnitDir is /etc/systemd/system for System and
// $XDG_CONFIG_HOME/systemd/user (or ~/.config/systemd/user) for User.
func DefaultUnitDir(m Mode) (string, error) {
	switch m {
	case System:
		return "/etc/systemd/system", nil
	case User:
		if x := os.Getenv("XDG_CONFIG_HOME"); x != "" && filepath.IsAbs(x) {
			return filepath.Join(x, "systemd", "user"), nil
		}
		home, err := os.UserHomeDir()
		if err != nil {
			return "", fmt.Errorf("%w: no home directory for the user unit directory: %v", ErrInvalid, err)
		}
		return filepath.Join(home, ".config", "systemd", "user"), nil
	}
	return "", fmt.Errorf("%w: mode %q (want system or user)", ErrInvalid, m)
}

func (m Mode) systemctl(args ...string) []string {
	if m == User {
		return append([]string{"systemctl", "--user"}, args...)
	}
	return append([]string{"systemctl"}, args...)
}

// Build makes the plan for cfg on host. It is pure: the same inputs give
// the same plan, byte for byte, which is what makes install idempotent.
func Build(cfg Config, host Host) (*Plan, error) {
	if !filepath.IsAbs(cfg.Exe) || !filepath.IsAbs(cfg.Root) {
		return nil, fmt.Errorf("%w: executable %q and store root %q must be absolute", ErrInvalid, cfg.Exe, cfg.Root)
	}
	dir := cfg.UnitDir
	if dir == "" {
		var err error
		if dir, err = DefaultUnitDir(cfg.Mode); err != nil {
			return nil, err
		}
	}
	if cfg.Mode != System && cfg.Mode != User {
		return nil, fmt.Errorf("%w: mode %q (want system or user)", ErrInvalid, cfg.Mode)
	}
	p := &Plan{
		Mode: cfg.Mode, Root: cfg.Root, Executable: cfg.Exe, Version: cfg.Version,
		Systemd: host.Systemd, UnitDir: dir, Units: UnitsFor(cfg.Root, cfg.DefaultStore),
	}
	u := p.Units
	if !host.Systemd {
		p.NoSystemd = host.Reason
	}
	reap := execLine(cfg.Exe, "--root", cfg.Root, "reap")
	serve := execLine(cfg.Exe, "--root", cfg.Root, "serve")
	socket := filepath.Join(cfg.Root, SocketName)
	marker := fmt.Sprintf("%s=%s\n%s=%s\n%s=%s\n%s=%s\n",
		keyFormat, FormatVersion, keyVersion, oneLine(cfg.Version), keyExecutable, oneLine(cfg.Exe), keyRoot, oneLine(cfg.Root))
	header := "# Written by 'hostfork support install'; 'hostfork support uninstall' removes it.\n"
	wantedBy := "timers.target"
	p.Files = []File{
		{Unit: u.ReapService, Content: header + "[Unit]\n" +
			"Description=hostfork reaper for " + specifierSafe(cfg.Root) + ": finish what crashes interrupted\n" +
			marker +
			"\n[Service]\nType=oneshot\n" +
			"ExecStart=" + reap + "\n" +
			"TimeoutStartSec=10min\n"},
		{Unit: u.ReapTimer, Content: header + "[Unit]\n" +
			"Description=Run the hostfork reaper for " + specifierSafe(cfg.Root) + " every minute\n" +
			marker +
			"\n[Timer]\nOnBootSec=1min\nOnUnitActiveSec=1min\nAccuracySec=10s\nUnit=" + u.ReapService + "\n" +
			"\n[Install]\nWantedBy=" + wantedBy + "\n"},
		// The API server, started by its socket's first connection. What
		// it creates is not the service's: environments and commands are
		// bounded by their own deadlines and keep running when the
		// server stops or restarts, so only its main process is killed.
		{Unit: u.ServeSocket, Content: header + "[Unit]\n" +
			"Description=hostfork API socket for " + specifierSafe(cfg.Root) + " (docs/api.md)\n" +
			marker +
			"\n[Socket]\nListenStream=" + specifierSafe(socket) + "\n" +
			"SocketMode=0660\nDirectoryMode=0700\nRemoveOnStop=yes\n" +
			"\n[Install]\nWantedBy=sockets.target\n"},
		{Unit: u.ServeService, Content: header + "[Unit]\n" +
			"Description=hostfork API server for " + specifierSafe(cfg.Root) + " (docs/api.md)\n" +
			"Requires=" + u.ServeSocket + "\nAfter=" + u.ServeSocket + "\n" +
			marker +
			"\n[Service]\nType=simple\n" +
			"ExecStart=" + serve + "\n" +
			"KillMode=process\nRestart=on-failure\n"},
		// 'hostfork reap' takes no environment argument: the finalizer
		// for one environment runs a full reap, which finalizes that
		// environment among any others due.
		{Unit: u.FinalizeService, Content: header + "[Unit]\n" +
			"Description=hostfork finalizer for environment %i in " + specifierSafe(cfg.Root) + " (runs a full reap)\n" +
			marker +
			"\n[Service]\nType=oneshot\n" +
			"Environment=HOSTFORK_FINALIZE_ENV=%i\n" +
			"ExecStart=" + reap + "\n" +
			"TimeoutStartSec=10min\n"},
	}
	for i := range p.Files {
		p.Files[i].Path = filepath.Join(dir, p.Files[i].Unit)
		p.Files[i].Mode = 0o644
		p.Files[i].ModeText = "0644"
	}
	p.Install = [][]string{cfg.Mode.systemctl("daemon-reload"), cfg.Mode.systemctl("enable", "--now", u.ReapTimer),
		cfg.Mode.systemctl("enable", "--now", u.ServeSocket), cfg.Mode.systemctl("try-restart", u.ServeService)}
	p.Uninstall = [][]string{cfg.Mode.systemctl("disable", "--now", u.ReapTimer), cfg.Mode.systemctl("disable", "--now", u.ServeSocket),
		cfg.Mode.systemctl("stop", u.ServeService), cfg.Mode.systemctl("daemon-reload")}

	p.Notes = append(p.Notes,
		fmt.Sprintf("%s runs '%s' once a minute (and a minute after boot); it is recovery and retention support, not the deadline clock: deadlines are enforced without it", u.ReapTimer, reap),
		fmt.Sprintf("%s is a finite template: 'systemctl%s start %s' finalizes one environment; reap takes no environment argument yet, so it runs a full reap", u.FinalizeService, map[bool]string{true: " --user"}[cfg.Mode == User], strings.Replace(u.FinalizeService, "@.", "@ENV.", 1)),
		fmt.Sprintf("%s listens on %s (mode 0660; only root and the store's owner may use the API); its first connection starts %s ('%s'), which then keeps serving: use it with 'hostfork --host unix://%s VERB' or HOSTFORK_HOST", u.ServeSocket, socket, u.ServeService, serve, socket),
		fmt.Sprintf("environments and commands made through the server are not %s's: they keep running when it stops or restarts (KillMode=process), bounded by their own deadlines; install restarts a running server when it rewrites the units", u.ServeService),
		"install creates the store "+cfg.Root+" if it does not exist yet (the API socket is made inside it)",
		"re-running install with the same executable, version and root changes nothing",
	)
	if len(socket) > 107 {
		p.Notes = append(p.Notes, fmt.Sprintf("%s is longer than a unix socket address allows (107 bytes): %s will fail to listen; choose a shorter store root", socket, u.ServeSocket))
	}
	if cfg.Mode == User {
		name := cmp.Or(cfg.UserName, "$USER")
		switch {
		case host.Linger != nil && *host.Linger:
			p.Notes = append(p.Notes, "lingering is enabled for "+name+": the user manager, and this reaper, keep running after logout")
		default:
			p.Notes = append(p.Notes, "the user manager stops when "+name+"'s last session ends, and this recovery path with it; to keep it across logout an administrator runs 'loginctl enable-linger "+name+"' (support never does)")
		}
	}
	if !host.Systemd {
		p.Alternatives = []string{
			"cron: add the line '* * * * * " + strings.ReplaceAll(shellLine(cfg.Exe, "--root", cfg.Root, "reap"), "%", `\%`) + "' (crontab -e as the user who owns the store; in /etc/cron.d with a user field after the five times)",
			"supervisor: run '" + shellLine(cfg.Exe, "--root", cfg.Root, "reap", "--watch", "--interval", "1m") + "' under your own supervisor (runit, s6, supervisord, a container's init); it reaps every minute until SIGINT or SIGTERM",
		}
	}
	if strings.Contains(cfg.Exe, "/go-build") || strings.HasPrefix(cfg.Exe, filepath.Clean(os.TempDir())+"/") {
		p.Notes = append(p.Notes, cfg.Exe+" looks temporary; install hostfork at a stable path (e.g. /usr/local/bin/hostfork) and plan from there")
	}
	p.Never = []string{
		"formats or mounts storage",
		"changes sysctls",
		"enables lingering",
		"runs a resident daemon before a client connects to the API socket (the reaper is a oneshot service; the server starts on demand)",
		"removes retained data: uninstall removes only the files listed here, never " + cfg.Root,
	}
	return p, nil
}

// execLine quotes argv for an ExecStart= line: specifiers (%) and
// variables ($) are escaped, and words with spaces or quotes are quoted.
func execLine(argv ...string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		a = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "%", "%%", "$", "$$").Replace(a)
		if a == "" || strings.ContainsAny(a, " \t'\"\\") {
			a = `"` + a + `"`
		}
		out[i] = a
	}
	return strings.Join(out, " ")
}

// shellLine quotes argv for a POSIX shell (a cron line, a supervisor).
func shellLine(argv ...string) string {
	out := make([]string, len(argv))
	for i, a := range argv {
		if a != "" && strings.Trim(a, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_./=:@+,") == "" {
			out[i] = a
		} else {
			out[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(out, " ")
}

func specifierSafe(s string) string { return strings.ReplaceAll(oneLine(s), "%", "%%") }

func oneLine(s string) string { return strings.NewReplacer("\n", " ", "\r", " ").Replace(s) }
