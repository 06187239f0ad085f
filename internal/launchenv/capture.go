package launchenv

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/internal/atomicfile"
)

// LoginShellEnv names a variable that overrides the login shell to capture
// (for tests and for operators whose password entry names no usable shell).
const LoginShellEnv = "HOSTFORK_LOGIN_SHELL"

// Capture limits.
const (
	DefaultCaptureTimeout = 10 * time.Second
	// DefaultMaxAge bounds how long a capture is reused even when nothing
	// it depends on visibly changed.
	DefaultMaxAge = 24 * time.Hour
	// CacheFile is the capture's file name under the store's cache
	// directory.
	CacheFile = "host-shell.env"
	// marker separates what the login scripts print from the environment.
	marker = "__HOSTFORK_ENV_BEGIN__"
	// maxOutput bounds what is read from the shell.
	maxOutput = 4 << 20
)

// ErrCapture wraps every capture failure.
var ErrCapture = errors.New("login-shell capture failed")

// Snapshot is one capture of the login shell's environment. It may hold
// credentials the login scripts export, so its cache file is private to
// the store's owner (0600 in a 0700 directory).
type Snapshot struct {
	Shell      string    `json:"shell"`
	UID        int       `json:"uid"`
	User       string    `json:"user"`
	Home       string    `json:"home"`
	CapturedAt time.Time `json:"captured_at"`
	Env        []string  `json:"env"`
	// Origin says whether this came from the cache or a new capture (not
	// stored).
	Origin string `json:"-"`
}

// Snapshot origins.
const (
	FromCache = "cache"
	Captured  = "captured"
)

// CurrentAccount describes the effective user from the password database
// (getent, so NSS users work, else /etc/passwd), falling back to os/user.
func CurrentAccount() (Account, error) {
	uid := os.Geteuid()
	a := Account{UID: uid}
	if line, err := getent(uid); err == nil {
		if f := strings.Split(line, ":"); len(f) >= 7 {
			a.Name, a.Home, a.Shell = f[0], f[5], f[6]
			return a, nil
		}
	}
	u, err := user.LookupId(strconv.Itoa(uid))
	if err != nil {
		return a, fmt.Errorf("looking up uid %d: %w", uid, err)
	}
	a.Name, a.Home = u.Username, u.HomeDir
	return a, nil
}

func getent(uid int) (string, error) {
	if p, err := exec.LookPath("getent"); err == nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, p, "passwd", strconv.Itoa(uid)).Output()
		if err == nil {
			return strings.TrimSpace(string(out)), nil
		}
	}
	f, err := os.Open("/etc/passwd")
	if err != nil {
		return "", err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fl := strings.Split(sc.Text(), ":")
		if len(fl) >= 7 && fl[2] == strconv.Itoa(uid) {
			return sc.Text(), nil
		}
	}
	return "", fmt.Errorf("uid %d is not in /etc/passwd", uid)
}

// LoginShell chooses the shell to capture: $HOSTFORK_LOGIN_SHELL, else the
// password entry's shell, else $SHELL, else /bin/sh. source says which.
func LoginShell(acct Account) (shell, source string) {
	if s := os.Getenv(LoginShellEnv); s != "" {
		return s, "$" + LoginShellEnv
	}
	if acct.Shell != "" {
		return acct.Shell, "password entry"
	}
	if s := os.Getenv("SHELL"); s != "" {
		return s, "$SHELL"
	}
	return "/bin/sh", "default"
}

// captureEnv is the environment the login shell starts with: what login(1)
// sets, plus the caller's locale (which PAM, not the shell, usually sets).
// The caller's other variables are left out on purpose, so the capture is
// the login shell's environment and not the caller's passed through it.
func captureEnv(acct Account, shell string, inherited []string) []string {
	env := []string{"PATH=" + DefaultPath, "SHELL=" + shell}
	if acct.Home != "" {
		env = append(env, "HOME="+acct.Home)
	}
	if acct.Name != "" {
		env = append(env, "USER="+acct.Name, "LOGNAME="+acct.Name)
	}
	for _, kv := range inherited {
		k, _, _ := strings.Cut(kv, "=")
		if k == "LANG" || k == "LANGUAGE" || strings.HasPrefix(k, "LC_") {
			env = append(env, kv)
		}
	}
	return env
}

// Capture runs shell as a non-interactive login shell (-l -c), with no
// standard input, in its own process group, and returns the environment it
// ends up with. Whatever the login scripts print is ignored. The shell (and
// anything left in its process group) is killed after timeout. Settings an
// interactive shell reads (for example the part of ~/.bashrc after its
// interactive-only guard) are not captured.
func Capture(ctx context.Context, shell string, acct Account, inherited []string, timeout time.Duration) (*Snapshot, error) {
	if timeout <= 0 {
		timeout = DefaultCaptureTimeout
	}
	if !filepath.IsAbs(shell) {
		return nil, fmt.Errorf("login shell %q is not an absolute path: %w", shell, ErrCapture)
	}
	switch filepath.Base(shell) {
	case "nologin", "false":
		return nil, fmt.Errorf("the login shell is %s, which can't run commands; set %s to a shell: %w", shell, LoginShellEnv, ErrCapture)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, shell, "-l", "-c", "echo "+marker+"; exec env -0")
	cmd.Env = captureEnv(acct, shell, inherited)
	cmd.Dir = "/"
	if acct.Home != "" {
		if st, err := os.Stat(acct.Home); err == nil && st.IsDir() {
			cmd.Dir = acct.Home
		}
	}
	var out, errb limitedBuffer
	out.max, errb.max = maxOutput, 4096
	cmd.Stdout, cmd.Stderr = &out, &errb
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = time.Second
	start := time.Now()
	err := cmd.Start()
	if err != nil {
		return nil, fmt.Errorf("starting login shell %s: %v: %w", shell, err, ErrCapture)
	}
	// The capture is a disposable session: end what its login scripts left
	// in its process group. Wait for the shell's exit without reaping it
	// first, so the group id can't have been reused when we signal it.
	pid := cmd.Process.Pid
	var info unix.Siginfo
	for {
		if werr := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT, nil); werr != unix.EINTR {
			break
		}
	}
	_ = unix.Kill(-pid, unix.SIGKILL)
	err = cmd.Wait()
	if ctx.Err() != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return nil, fmt.Errorf("login shell %s did not finish within %v: %w", shell, timeout, ErrCapture)
	}
	if err != nil {
		msg := strings.TrimSpace(errb.String())
		if msg != "" {
			msg = ": " + lastLine(msg)
		}
		return nil, fmt.Errorf("login shell %s -l -c: %v%s: %w", shell, err, msg, ErrCapture)
	}
	env, err := parseCapture(out.Bytes())
	if err != nil {
		return nil, fmt.Errorf("login shell %s: %v: %w", shell, err, ErrCapture)
	}
	return &Snapshot{Shell: shell, UID: acct.UID, User: acct.Name, Home: acct.Home, CapturedAt: start.UTC(), Env: env, Origin: Captured}, nil
}

// parseCapture extracts the NUL-separated environment printed after the
// marker. Variables that describe the capture process itself (_, PWD,
// OLDPWD, SHLVL) are dropped.
func parseCapture(out []byte) ([]string, error) {
	m := []byte(marker + "\n")
	i := bytes.LastIndex(out, m)
	if i < 0 {
		return nil, errors.New("it printed no environment (does its startup exit early or replace the shell?)")
	}
	var env []string
	for _, kv := range bytes.Split(out[i+len(m):], []byte{0}) {
		if len(kv) == 0 {
			continue
		}
		k, _, ok := strings.Cut(string(kv), "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("malformed environment entry %q", string(kv))
		}
		switch k {
		case "_", "PWD", "OLDPWD", "SHLVL":
			continue
		}
		env = append(env, string(kv))
	}
	if len(env) == 0 {
		return nil, errors.New("it printed an empty environment")
	}
	return env, nil
}

func lastLine(s string) string {
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return s[i+1:]
	}
	return s
}

type limitedBuffer struct {
	bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room < len(p) {
		if room > 0 {
			b.Buffer.Write(p[:room])
		}
		return len(p), nil
	}
	return b.Buffer.Write(p)
}

// StartupFiles lists the files whose change makes a capture stale: the
// system and personal startup files of the common login shells, and the
// shell itself.
func StartupFiles(home, shell string) []string {
	files := []string{shell, "/etc/profile", "/etc/environment", "/etc/bash.bashrc",
		"/etc/zsh/zshenv", "/etc/zsh/zprofile", "/etc/zsh/zlogin", "/etc/zshenv", "/etc/zprofile", "/etc/profile.d"}
	if ents, err := os.ReadDir("/etc/profile.d"); err == nil {
		for _, e := range ents {
			files = append(files, filepath.Join("/etc/profile.d", e.Name()))
		}
	}
	if home != "" {
		for _, f := range []string{".profile", ".bash_profile", ".bash_login", ".bashrc", ".zshenv", ".zprofile", ".zlogin", ".zshrc", ".config/fish/config.fish"} {
			files = append(files, filepath.Join(home, f))
		}
	}
	return files
}

// ModTimes stats files; missing ones are left out.
func ModTimes(files []string) map[string]time.Time {
	m := map[string]time.Time{}
	for _, f := range files {
		if st, err := os.Stat(f); err == nil {
			m[f] = st.ModTime()
		}
	}
	return m
}

// Fresh decides whether a cached capture may be reused: the same shell and
// user, younger than maxAge, and captured after every startup file's last
// change. reason says why not.
func Fresh(s *Snapshot, shell string, acct Account, now time.Time, maxAge time.Duration, startup map[string]time.Time) (ok bool, reason string) {
	switch {
	case s == nil:
		return false, "no capture yet"
	case s.Shell != shell:
		return false, fmt.Sprintf("the login shell changed (%s, was %s)", shell, s.Shell)
	case s.UID != acct.UID || s.Home != acct.Home:
		return false, "the user changed"
	case maxAge > 0 && now.Sub(s.CapturedAt) > maxAge:
		return false, fmt.Sprintf("the capture is older than %v", maxAge)
	}
	var newest string
	var newestT time.Time
	for f, t := range startup {
		if t.After(s.CapturedAt) && (newest == "" || t.After(newestT) || (t.Equal(newestT) && f < newest)) {
			newest, newestT = f, t
		}
	}
	if newest != "" {
		return false, newest + " changed after the capture"
	}
	return true, ""
}

// LoadCache reads a cached capture; a missing file is (nil, nil).
func LoadCache(dir string) (*Snapshot, error) {
	b, err := os.ReadFile(filepath.Join(dir, CacheFile))
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var s Snapshot
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, CacheFile), err)
	}
	s.Origin = FromCache
	return &s, nil
}

// SaveCache writes the capture durably (atomicfile),
// readable only by its owner.
func SaveCache(dir string, s *Snapshot) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	b, err := json.Marshal(s)
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(dir, CacheFile), b, 0o600); err != nil {
		return fmt.Errorf("saving the host-shell capture: %w", err)
	}
	return nil
}

// HostShellOptions configure HostShell.
type HostShellOptions struct {
	// CacheDir holds the capture (the store's cache directory); "" means
	// capture every time.
	CacheDir string
	// Refresh forces a new capture.
	Refresh bool
	// Inherited is the caller's environment (its locale is passed on).
	Inherited []string
	Timeout   time.Duration
	MaxAge    time.Duration
}

// HostShell returns the login shell's environment: the cached capture while
// it is fresh, else a new capture, which replaces the cache. A failure to
// write the cache does not fail the capture.
func HostShell(ctx context.Context, o HostShellOptions) (*Snapshot, error) {
	acct, err := CurrentAccount()
	if err != nil {
		return nil, fmt.Errorf("%v: %w", err, ErrCapture)
	}
	shell, _ := LoginShell(acct)
	o.MaxAge = cmp.Or(o.MaxAge, DefaultMaxAge)
	if o.CacheDir != "" && !o.Refresh {
		if s, err := LoadCache(o.CacheDir); err == nil && s != nil {
			if ok, _ := Fresh(s, shell, acct, time.Now(), o.MaxAge, ModTimes(StartupFiles(acct.Home, shell))); ok {
				return s, nil
			}
		}
	}
	s, err := Capture(ctx, shell, acct, o.Inherited, o.Timeout)
	if err != nil {
		return nil, err
	}
	if o.CacheDir != "" {
		_ = SaveCache(o.CacheDir, s)
	}
	return s, nil
}
