package support

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/habemus-papadum/hostfork/internal/atomicfile"
)

// Runner runs a command (systemctl) and returns its combined output; a
// non-zero exit is an *exec.ExitError.
type Runner func(ctx context.Context, argv []string) (string, error)

// ExecRunner runs argv as a child process.
func ExecRunner(ctx context.Context, argv []string) (string, error) {
	out, err := exec.CommandContext(ctx, argv[0], argv[1:]...).CombinedOutput()
	return string(out), err
}

// Detect looks for a running systemd manager for mode: the system manager
// (systemd is PID 1 exactly when /run/systemd/system is a directory) and,
// for User, the user's manager (its private socket in the runtime
// directory), plus whether the user lingers.
func Detect(m Mode, userName string) Host {
	if st, err := os.Stat("/run/systemd/system"); err != nil || !st.IsDir() {
		comm, _ := os.ReadFile("/proc/1/comm")
		return Host{Reason: fmt.Sprintf("PID 1 is not systemd (/run/systemd/system does not exist; PID 1 is %s)", strings.TrimSpace(string(comm)))}
	}
	if m != User {
		return Host{Systemd: true}
	}
	h := Host{}
	if userName != "" {
		_, err := os.Stat(filepath.Join("/var/lib/systemd/linger", userName))
		l := err == nil
		h.Linger = &l
	}
	uid := strconv.Itoa(os.Getuid())
	dirs := []string{"/run/user/" + uid}
	if x := os.Getenv("XDG_RUNTIME_DIR"); x != "" {
		dirs = append([]string{x}, dirs...)
	}
	for _, d := range dirs {
		if st, err := os.Stat(filepath.Join(d, "systemd", "private")); err == nil && st.Mode()&os.ModeSocket != 0 {
			h.Systemd = true
			return h
		}
	}
	h.Reason = "no user manager is running for uid " + uid + " (no /run/user/" + uid + "/systemd/private): log in through a session that starts 'systemd --user', or have an administrator enable lingering"
	return h
}

// Executable returns the running executable's absolute, symlink-resolved
// path: what the units should run.
func Executable() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("finding hostfork's executable: %w", err)
	}
	if p, err := filepath.EvalSymlinks(exe); err == nil {
		exe = p
	}
	return exe, nil
}

// checkStable refuses an executable that won't outlive this run.
func checkStable(exe string) error {
	if strings.HasSuffix(exe, " (deleted)") {
		return fmt.Errorf("%w: %s was deleted while running; run the installed hostfork", ErrUnstableExecutable, exe)
	}
	if _, err := os.Stat(exe); err != nil {
		return fmt.Errorf("%w: %v", ErrUnstableExecutable, err)
	}
	if strings.Contains(exe, "/go-build") {
		return fmt.Errorf("%w: %s is in Go's build cache; install hostfork (e.g. scripts/build.sh /usr/local/bin) and run support install from there", ErrUnstableExecutable, exe)
	}
	return nil
}

// unitFile is what was found at a planned path.
type unitFile struct {
	present bool
	content string
	markers map[string]string
}

func readUnit(path string) (unitFile, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return unitFile{}, nil
	}
	if err != nil {
		return unitFile{}, err
	}
	u := unitFile{present: true, content: string(b), markers: map[string]string{}}
	for _, l := range strings.Split(u.content, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(l), "=")
		if ok && strings.HasPrefix(k, "X-Hostfork-") {
			u.markers[k] = v
		}
	}
	return u, nil
}

func (u unitFile) ours() bool { return u.markers[keyFormat] != "" }

// InstallResult is what install did.
type InstallResult struct {
	Written   []string   `json:"written"`
	Unchanged []string   `json:"unchanged"`
	Ran       [][]string `json:"ran"`
	// Changed is false when the installation was already exactly as
	// planned: nothing was written and nothing was run.
	Changed bool `json:"changed"`
}

// Install writes exactly the plan's files (mode 0644, atomically, only
// those whose content differs) and runs its commands: a reload when a file
// changed, enabling the timer and the API socket when they are not
// enabled and active, and a restart of a running API server when a file
// changed. It refuses
// without systemd (ErrNoSystemd), for an executable that won't last
// (ErrUnstableExecutable), and when a planned path holds a file that is not
// hostfork's or is hostfork's for another store root (ErrConflict).
func Install(ctx context.Context, p *Plan, run Runner) (*InstallResult, error) {
	if !p.Systemd {
		return nil, fmt.Errorf("%w for --%s: %s; instead use %s", ErrNoSystemd, p.Mode, p.NoSystemd, strings.Join(p.Alternatives, "; or "))
	}
	if err := checkStable(p.Executable); err != nil {
		return nil, err
	}
	found := make([]unitFile, len(p.Files))
	for i, f := range p.Files {
		u, err := readUnit(f.Path)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", f.Path, err)
		}
		if u.present && !u.ours() {
			return nil, fmt.Errorf("%w: %s exists and was not written by hostfork; move it away first", ErrConflict, f.Path)
		}
		if u.present && u.markers[keyRoot] != p.Root {
			return nil, fmt.Errorf("%w: %s is installed for the store root %s; run 'hostfork --root %s support uninstall' first (one store root per manager)", ErrConflict, f.Path, u.markers[keyRoot], u.markers[keyRoot])
		}
		found[i] = u
	}
	res := &InstallResult{Written: []string{}, Unchanged: []string{}, Ran: [][]string{}}
	if err := os.MkdirAll(p.UnitDir, 0o755); err != nil {
		return nil, fmt.Errorf("creating %s: %w", p.UnitDir, err)
	}
	for i, f := range p.Files {
		if found[i].present && found[i].content == f.Content {
			res.Unchanged = append(res.Unchanged, f.Path)
			continue
		}
		if err := atomicfile.WriteFile(f.Path, []byte(f.Content), f.Mode); err != nil {
			return res, err
		}
		res.Written = append(res.Written, f.Path)
	}
	runCmd := func(argv []string) error {
		res.Ran = append(res.Ran, argv)
		if out, err := run(ctx, argv); err != nil {
			return fmt.Errorf("%s: %w: %s", strings.Join(argv, " "), err, strings.TrimSpace(out))
		}
		return nil
	}
	if len(res.Written) > 0 {
		if err := runCmd(p.Install[0]); err != nil {
			return res, err
		}
	}
	// The timer and the socket: enabled and running, or enabled now.
	for i, unit := range []string{p.Units.ReapTimer, p.Units.ServeSocket} {
		enabled, _ := run(ctx, p.Mode.systemctl("is-enabled", unit))
		active, _ := run(ctx, p.Mode.systemctl("is-active", unit))
		if strings.TrimSpace(enabled) != "enabled" || strings.TrimSpace(active) != "active" {
			if err := runCmd(p.Install[1+i]); err != nil {
				return res, err
			}
		}
	}
	// A server that runs the old units (an older executable) restarts on
	// the new ones; what it made runs on.
	if len(res.Written) > 0 {
		if err := runCmd(p.Install[3]); err != nil {
			return res, err
		}
	}
	res.Changed = len(res.Written) > 0 || len(res.Ran) > 0
	return res, nil
}

// UnitStatus is one planned unit as found.
type UnitStatus struct {
	Unit    string `json:"unit"`
	Path    string `json:"path"`
	Present bool   `json:"present"`
	Ours    bool   `json:"ours"`
	// UpToDate: the file is exactly what install would write now.
	UpToDate bool `json:"up_to_date"`
	// Executable is the program of its ExecStart= (services).
	Executable string `json:"executable,omitempty"`
	Version    string `json:"version,omitempty"`
	Root       string `json:"root,omitempty"`
	// Enabled and Active are what systemctl is-enabled / is-active say
	// ("" without systemd).
	Enabled  string   `json:"enabled,omitempty"`
	Active   string   `json:"active,omitempty"`
	Findings []string `json:"findings,omitempty"`
}

// Status is the installation as found, against the plan.
type Status struct {
	Mode      Mode   `json:"mode"`
	UnitDir   string `json:"unit_dir"`
	Systemd   bool   `json:"systemd"`
	NoSystemd string `json:"no_systemd,omitempty"`
	// Installed: every planned file is present and hostfork's.
	Installed bool         `json:"installed"`
	Units     []UnitStatus `json:"units"`
	// Findings are what is wrong with an installation: a moved or stale
	// binary, another root, an edited file, a timer that is not running,
	// a partial installation. None when nothing is installed.
	Findings []string `json:"findings"`
}

// Inspect reports each planned unit: whether its file is there and
// hostfork's, whether ExecStart runs this executable and version, and what
// systemctl says about it.
func Inspect(ctx context.Context, p *Plan, run Runner) (*Status, error) {
	s := &Status{Mode: p.Mode, UnitDir: p.UnitDir, Systemd: p.Systemd, NoSystemd: p.NoSystemd, Installed: true, Findings: []string{}}
	present := 0
	for _, f := range p.Files {
		u, err := readUnit(f.Path)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", f.Path, err)
		}
		us := UnitStatus{Unit: f.Unit, Path: f.Path, Present: u.present, Ours: u.ours(), UpToDate: u.present && u.content == f.Content}
		us.Version, us.Root = u.markers[keyVersion], u.markers[keyRoot]
		if u.present {
			present++
			us.Executable = execProgram(u.content)
		}
		switch {
		case !u.present:
			s.Installed = false
		case !u.ours():
			s.Installed = false
			us.Findings = append(us.Findings, f.Path+" exists but was not written by hostfork")
		default:
			if us.Executable != "" {
				if _, err := os.Stat(us.Executable); err != nil {
					us.Findings = append(us.Findings, fmt.Sprintf("%s runs %s, which no longer exists (a moved binary)", f.Unit, us.Executable))
				} else if !sameFile(us.Executable, p.Executable) {
					us.Findings = append(us.Findings, fmt.Sprintf("%s runs %s, not this executable (%s)", f.Unit, us.Executable, p.Executable))
				}
			}
			if us.Version != p.Version {
				us.Findings = append(us.Findings, fmt.Sprintf("%s was written by hostfork %s; this is %s (a stale installation)", f.Unit, us.Version, p.Version))
			}
			if us.Root != p.Root {
				us.Findings = append(us.Findings, fmt.Sprintf("%s reaps the store root %s, not %s", f.Unit, us.Root, p.Root))
			}
			if len(us.Findings) == 0 && !us.UpToDate {
				us.Findings = append(us.Findings, f.Path+" differs from what install writes (edited by hand?)")
			}
		}
		if p.Systemd && u.present {
			out, _ := run(ctx, p.Mode.systemctl("is-enabled", f.Unit))
			us.Enabled = firstLine(out)
			if !strings.Contains(f.Unit, "@.") {
				out, _ = run(ctx, p.Mode.systemctl("is-active", f.Unit))
				us.Active = firstLine(out)
			}
			if (f.Unit == p.Units.ReapTimer || f.Unit == p.Units.ServeSocket) && u.ours() && (us.Enabled != "enabled" || us.Active != "active") {
				us.Findings = append(us.Findings, fmt.Sprintf("%s is %s and %s, not enabled and active", f.Unit, us.Enabled, us.Active))
			}
		}
		s.Units = append(s.Units, us)
		s.Findings = append(s.Findings, us.Findings...)
	}
	if present > 0 && present < len(p.Files) {
		var missing []string
		for _, u := range s.Units {
			if !u.Present {
				missing = append(missing, u.Path)
			}
		}
		s.Findings = append(s.Findings, "partial installation: missing "+strings.Join(missing, ", "))
	}
	if present > 0 && !p.Systemd {
		s.Findings = append(s.Findings, "units are installed but no systemd manager runs them: "+p.NoSystemd)
	}
	return s, nil
}

// UninstallResult is what uninstall did.
type UninstallResult struct {
	Removed []string `json:"removed"`
	// Kept are planned paths holding files that are not hostfork's, or
	// hostfork's for another store root, with the reason.
	Kept   []string   `json:"kept"`
	Absent []string   `json:"absent"`
	Ran    [][]string `json:"ran"`
	// Steps are the commands run and the files removed, in order.
	Steps []string `json:"steps"`
	// Warnings are commands that failed without stopping the uninstall.
	Warnings []string `json:"warnings,omitempty"`
}

// Uninstall disables the timer and the API socket, stops the API server
// (what it made runs on), removes exactly the plan's files that are
// hostfork's and belong to this store root, then reloads the manager.
// It never touches the store root or anything else.
func Uninstall(ctx context.Context, p *Plan, run Runner) (*UninstallResult, error) {
	res := &UninstallResult{Removed: []string{}, Kept: []string{}, Absent: []string{}, Ran: [][]string{}, Steps: []string{}}
	var remove []string
	ours := map[string]bool{}
	for _, f := range p.Files {
		u, err := readUnit(f.Path)
		if err != nil {
			return nil, fmt.Errorf("reading %s: %w", f.Path, err)
		}
		switch {
		case !u.present:
			res.Absent = append(res.Absent, f.Path)
		case !u.ours():
			res.Kept = append(res.Kept, f.Path+": not written by hostfork")
		case u.markers[keyRoot] != p.Root:
			res.Kept = append(res.Kept, f.Path+": installed for the store root "+u.markers[keyRoot]+" (uninstall with --root "+u.markers[keyRoot]+")")
		default:
			remove = append(remove, f.Path)
			ours[f.Unit] = true
		}
	}
	runCmd := func(argv []string) {
		res.Ran = append(res.Ran, argv)
		res.Steps = append(res.Steps, "ran     "+strings.Join(argv, " "))
		if out, err := run(ctx, argv); err != nil {
			res.Warnings = append(res.Warnings, fmt.Sprintf("%s: %v: %s", strings.Join(argv, " "), err, strings.TrimSpace(out)))
		}
	}
	// Disable the timer and the socket, stop the server (what it made
	// runs on), then remove the files.
	if p.Systemd {
		for i, unit := range []string{p.Units.ReapTimer, p.Units.ServeSocket, p.Units.ServeService} {
			if ours[unit] {
				runCmd(p.Uninstall[i])
			}
		}
	}
	for _, path := range remove {
		if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
			return res, fmt.Errorf("removing %s: %w", path, err)
		}
		res.Removed = append(res.Removed, path)
		res.Steps = append(res.Steps, "removed "+path)
	}
	if p.Systemd && len(remove) > 0 {
		runCmd(p.Uninstall[3])
	}
	return res, nil
}

// execProgram returns the program of a unit's first ExecStart=, without
// systemd's prefixes and quoting.
func execProgram(unit string) string {
	for _, l := range strings.Split(unit, "\n") {
		v, ok := strings.CutPrefix(strings.TrimSpace(l), "ExecStart=")
		if !ok {
			continue
		}
		v = strings.TrimLeft(strings.TrimSpace(v), "-@+!:")
		var prog string
		if strings.HasPrefix(v, `"`) {
			var b strings.Builder
			for i := 1; i < len(v); i++ {
				if v[i] == '\\' && i+1 < len(v) {
					i++
					b.WriteByte(v[i])
					continue
				}
				if v[i] == '"' {
					break
				}
				b.WriteByte(v[i])
			}
			prog = b.String()
		} else if f := strings.Fields(v); len(f) > 0 {
			prog = f[0]
		}
		return strings.NewReplacer("%%", "%", "$$", "$").Replace(prog)
	}
	return ""
}

func sameFile(a, b string) bool {
	sa, err1 := os.Stat(a)
	sb, err2 := os.Stat(b)
	return err1 == nil && err2 == nil && os.SameFile(sa, sb)
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}
