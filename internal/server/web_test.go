package server_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/log"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/habemus-papadum/hostfork/client"
	"github.com/habemus-papadum/hostfork/internal/server"
	"github.com/habemus-papadum/hostfork/internal/server/servertest"
	"github.com/habemus-papadum/hostfork/internal/testutil"
)

// startWeb starts `hostfork serve --web 127.0.0.1:0` and returns it, the
// page's base URL and its token.
func startWeb(t testing.TB) (*servertest.Env, *servertest.Serve, *url.URL, string) {
	t.Helper()
	e := servertest.New(t)
	s := e.Serve("--web", "127.0.0.1:0")
	u, err := url.Parse(s.Web)
	if err != nil || u.Query().Get("token") == "" {
		t.Fatalf("the printed web URL %q carries no token (%v)", s.Web, err)
	}
	token := u.Query().Get("token")
	u.RawQuery = ""
	return e, s, u, token
}

// TestWebSecurity: the web view's checks, from a plain HTTP client (a
// browser's requests, forged): 401 without the token, 403 for another
// origin, Host or Referer, the cookie's flags, the CSP, the token's file,
// and that the page's routes are only reads and stop.
func TestWebSecurity(t *testing.T) {
	e, _, base, token := startWeb(t)
	hc := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	do := func(method, path string, hdr map[string]string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, base.String()+strings.TrimPrefix(path, "/"), nil)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range hdr {
			if k == "Host" {
				req.Host = v
			} else {
				req.Header.Set(k, v)
			}
		}
		r, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		return r
	}
	cookie := map[string]string{"Cookie": server.WebCookie + "=" + token}
	with := func(kv ...string) map[string]string {
		m := map[string]string{"Cookie": cookie["Cookie"]}
		for i := 0; i < len(kv); i += 2 {
			m[kv[i]] = kv[i+1]
		}
		return m
	}
	self := strings.TrimSuffix(base.String(), "/")
	for _, c := range []struct {
		name, method, path string
		hdr                map[string]string
		want               int
	}{
		{"no token", "GET", "/", nil, 401},
		{"no token, API", "GET", "/v1/envs", nil, 401},
		{"no token, a file", "GET", "/static/app.js", nil, 401},
		{"a wrong token", "GET", "/?token=" + strings.Repeat("0", len(token)), nil, 401},
		{"a wrong cookie", "GET", "/v1/envs", map[string]string{"Cookie": server.WebCookie + "=x"}, 401},
		{"the token", "GET", "/?token=" + token, nil, 303},
		{"the cookie", "GET", "/", cookie, 200},
		{"the cookie, API", "GET", "/v1/envs", cookie, 200},
		{"bearer", "GET", "/v1/capacity", map[string]string{"Authorization": "Bearer " + token}, 200},
		{"a foreign Origin", "GET", "/v1/envs", with("Origin", "http://evil.example"), 403},
		{"a foreign Origin on stop", "POST", "/v1/envs/x/stop", with("Origin", "http://evil.example"), 403},
		{"the null Origin", "GET", "/v1/envs", with("Origin", "null"), 403},
		{"this Origin", "GET", "/v1/envs", with("Origin", self), 200},
		{"a foreign Host", "GET", "/", with("Host", "evil.example:"+base.Port()), 403},
		{"a rebinding Host", "GET", "/v1/envs", with("Host", "evil.example"), 403},
		{"another port", "GET", "/", with("Host", "127.0.0.1:1"), 403},
		{"the token in a foreign Referer", "GET", "/?token=" + token, map[string]string{"Referer": "http://evil.example/?token=" + token}, 403},
		{"cross-site", "GET", "/v1/envs", with("Sec-Fetch-Site", "cross-site"), 403},
		{"same-origin", "GET", "/v1/envs", with("Sec-Fetch-Site", "same-origin"), 200},
		{"no create", "POST", "/v1/envs", cookie, 404},
		{"no pause", "POST", "/v1/pause", cookie, 404},
		{"no files", "GET", "/v1/envs/x/files?path=/etc/passwd", cookie, 404},
		{"no metrics", "GET", "/metrics", cookie, 404},
	} {
		if r := do(c.method, c.path, c.hdr); r.StatusCode != c.want {
			t.Errorf("%s: %s %s: status %d, want %d", c.name, c.method, c.path, r.StatusCode, c.want)
		}
	}

	r := do("GET", "/?token="+token, nil)
	var ck *http.Cookie
	for _, c := range r.Cookies() {
		if c.Name == server.WebCookie {
			ck = c
		}
	}
	if ck == nil || ck.Value != token || !ck.HttpOnly || ck.SameSite != http.SameSiteStrictMode || r.Header.Get("Location") != "/" {
		t.Errorf("the token's answer: cookie %+v, Location %q; want HttpOnly, SameSite=Strict, and a redirect to /", ck, r.Header.Get("Location"))
	}
	r = do("GET", "/", cookie)
	csp := r.Header.Get("Content-Security-Policy")
	if !strings.Contains(csp, "frame-ancestors 'none'") || !strings.Contains(csp, "script-src 'self';") || strings.Contains(csp, "unsafe-eval") ||
		strings.Contains(strings.SplitN(strings.SplitN(csp, "script-src", 2)[1], ";", 2)[0], "unsafe-inline") || r.Header.Get("X-Frame-Options") != "DENY" {
		t.Errorf("CSP %q, X-Frame-Options %q: want scripts from self only and no framing", csp, r.Header.Get("X-Frame-Options"))
	}

	fi, err := os.Stat(filepath.Join(e.Root, "web-token"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("web-token: %v, mode %v; want 0600", err, fi.Mode())
	}
	if b, _ := os.ReadFile(filepath.Join(e.Root, "web-token")); strings.TrimSpace(string(b)) != token {
		t.Errorf("web-token holds %q, not the printed token", b)
	}

	// Not loopback, without TLS: refused before anything starts.
	cmd := e.Command("serve", "--web", "0.0.0.0:0")
	if out, err := cmd.CombinedOutput(); err == nil || !strings.Contains(string(out), "loopback") {
		t.Errorf("serve --web 0.0.0.0:0: %v\n%s; want a usage error naming loopback", err, out)
	}
}

// browser starts Debian's chromium, headless, with a context whose
// console errors and exceptions are gathered, and a JavaScript dialog
// (alert) fails the test.
func browser(t testing.TB, width, height int) (context.Context, *consoleErrors) {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		testutil.Skip(t, "no chromium (apt-get install chromium)")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.WindowSize(width, height),
		chromedp.Flag("disable-gpu", true))
	actx, acancel := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, tcancel := context.WithTimeout(ctx, 4*time.Minute)
	t.Cleanup(func() { tcancel(); cancel(); acancel() })
	errs := &consoleErrors{}
	err = chromedp.Listen(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError {
				var s []string
				for _, a := range ev.Args {
					s = append(s, string(a.Value))
				}
				errs.add("console.error: " + strings.Join(s, " "))
			}
		case *runtime.EventExceptionThrown:
			errs.add(fmt.Sprintf("exception: %s %s:%d", ev.ExceptionDetails.Text, ev.ExceptionDetails.URL, ev.ExceptionDetails.LineNumber))
		case *log.EventEntryAdded:
			// The 401 page (no token) has no icon link: the browser's
			// own request for one is refused too.
			if ev.Entry.Level == log.EntryLevelError && !strings.HasSuffix(ev.Entry.URL, "/favicon.ico") {
				errs.add("log: " + ev.Entry.Text + " " + ev.Entry.URL)
			}
		case *page.EventJavascriptDialogOpening:
			errs.add("a dialog opened: " + ev.Message)
			go chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: false})
		}
	})
	if err == nil {
		_, err = chromedp.Call(ctx, log.Enable, cdp.Empty{})
	}
	if err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx, errs
}

// js evaluates a JavaScript expression in the page.
func js[T any](t testing.TB, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// consoleErrors gathers what the browser reported (from its event loop).
type consoleErrors struct {
	mu   sync.Mutex
	errs []string
}

func (c *consoleErrors) add(s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.errs = append(c.errs, s)
}

func (c *consoleErrors) take() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.errs
	c.errs = nil
	return e
}

// poll evaluates a JavaScript expression until it is true, within bound
// (a safety bound only), and returns how long that took.
func poll(t testing.TB, ctx context.Context, what, expr string, bound time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	for {
		ok, err := chromedp.Run(ctx, chromedp.Evaluate[bool](expr))
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if ok {
			return time.Since(start)
		}
		if time.Since(start) > bound {
			body, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`document.body.innerText`))
			t.Fatalf("%s: not within %s; the page says:\n%s", what, bound, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// shot saves a screenshot of the page in the test's directory, and in
// $HOSTFORK_WEB_SCREENSHOTS (docs/img, for the README) when it is set.
func shot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	dirs := []string{t.TempDir()}
	if d := os.Getenv("HOSTFORK_WEB_SCREENSHOTS"); d != "" {
		dirs = append(dirs, d)
	}
	for _, d := range dirs {
		if err := os.WriteFile(filepath.Join(d, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// TestWebView drives the page in a real browser (Debian's chromium,
// headless): 401 without the token; with it, a command started during the
// test appears, its log tail grows as it prints, the event list grows, a
// terminal session shows through xterm.js, HTML in a purpose or in the
// output stays text, a stop from the page (with its confirmation) ends
// the tree (checked by pid), the page fits 400 px, and the console has no
// errors.
func TestWebView(t *testing.T) {
	e, s, base, token := startWeb(t)
	c := newClient(t, s)
	ctx := ctxFor(t, 4*time.Minute)
	bctx, errs := browser(t, 1280, 900)

	if err := chromedp.Do(bctx, chromedp.Navigate(base.String())); err != nil {
		t.Fatal(err)
	}
	body := js[string](t, bctx, `document.body.innerText`)
	if !strings.Contains(body, "open the URL hostfork serve printed") {
		t.Fatalf("without the token the page says %q; want the 401's message", body)
	}
	errs.take() // the 401's "failed to load resource"

	// A workload already there: an environment with a limit (counters).
	lim := map[string]any{"lifetime": map[string]any{"max_runtime": "10m"}, "purpose": "web test", "labels": map[string]string{"team": "web"},
		"limits": map[string]any{"memory": "512M"}}
	if _, err := c.Run(ctx, client.RunRequest{Env: lim, Command: client.CommandRequest{Argv: []string{"sleep", "600"}, Purpose: "idle sleeper"}}); err != nil {
		t.Fatal(err)
	}
	if err := chromedp.Do(bctx, chromedp.Navigate(base.String()+"?token="+token)); err != nil {
		t.Fatal(err)
	}
	poll(t, bctx, "the event stream connects", `document.getElementById('conn').textContent === 'live'`, 30*time.Second)
	poll(t, bctx, "the environment shows", `document.querySelectorAll('#envs .env').length === 1`, 30*time.Second)
	t.Logf("first render %.0f ms after the navigation started", js[float64](t, bctx, `performance.getEntriesByName('first-render')[0].startTime`))
	// The page lists environments without their commands (commands=0).
	if ok, err := chromedp.Run(bctx, chromedp.Evaluate[bool](`fetch('/v1/envs?commands=0').then((r) => r.json()).then((a) => a.length === 1 && a[0].commands === null)`, chromedp.EvalAwaitPromise)); err != nil || !ok {
		t.Errorf("GET /v1/envs?commands=0 from the page: %v, %v; want one environment without its commands", ok, err)
	}
	before := js[int](t, bctx, `document.querySelectorAll('#events li').length`)

	// A command started now.
	loop := `i=0; while :; do echo "step $i: ok"; i=$((i+1)); sleep 0.2; done`
	env, err := c.Run(ctx, client.RunRequest{Env: map[string]any{"lifetime": map[string]any{"max_runtime": "10m"}, "purpose": "nightly checks", "labels": map[string]string{"task": "ci"}},
		Command: client.CommandRequest{Argv: []string{"sh", "-c", loop}, Purpose: "run the test suite", Labels: map[string]string{"suite": "unit"}}})
	if err != nil {
		t.Fatal(err)
	}
	id := env.Commands[0].ID
	took := poll(t, bctx, "the new command shows", fmt.Sprintf(`!!document.querySelector('#cmds .cmd[data-id=%q]')`, id), 15*time.Second)
	t.Logf("the command showed %v after its start returned (issue 40 asks 1s)", took.Round(time.Millisecond))
	poll(t, bctx, "the event list grows", fmt.Sprintf(`document.querySelectorAll('#events li').length > %d`, before), 15*time.Second)
	shot(t, bctx, "web-overview.png")

	// A workload whose purpose and output hold HTML and script: text.
	const evil = `<img src=x onerror="alert(1)"><script>alert(2)</script>`
	xenv, err := c.Run(ctx, client.RunRequest{Env: map[string]any{"lifetime": map[string]any{"max_runtime": "10m"}, "purpose": "env " + evil},
		Command: client.CommandRequest{Argv: []string{"sh", "-c", `echo "<b id=bold>x</b> <img src=x onerror=alert(3)>"; exec sleep 600`}, Purpose: evil}})
	if err != nil {
		t.Fatal(err)
	}
	xid := xenv.Commands[0].ID
	poll(t, bctx, "the HTML command shows", fmt.Sprintf(`!!document.querySelector('#cmds .cmd[data-id=%q]')`, xid), 15*time.Second)
	js[chromedp.Void](t, bctx, fmt.Sprintf(`document.querySelector('#cmds .cmd[data-id=%q]').click()`, xid))
	poll(t, bctx, "its output", `document.getElementById('log').textContent.includes('<b id=bold>')`, 30*time.Second)
	poll(t, bctx, "its purpose", fmt.Sprintf(`document.getElementById('detail').textContent.includes(%q)`, "env "+evil), 30*time.Second)
	if n := js[int](t, bctx, `document.querySelectorAll('#bold, main img, main script').length`); n != 0 {
		t.Errorf("%d elements were made from the workload's HTML", n)
	}

	js[chromedp.Void](t, bctx, fmt.Sprintf(`document.querySelector('#cmds .cmd[data-id=%q]').click()`, id))
	poll(t, bctx, "the five answers", `!!document.getElementById('answers') && document.getElementById('alive').textContent.includes('live') && document.getElementById('detail').textContent.includes('nightly checks')`, 15*time.Second)
	poll(t, bctx, "the log tail", `document.getElementById('log').textContent.includes('step 3: ok')`, 30*time.Second)
	n1 := js[int](t, bctx, `document.getElementById('log').textContent.length`)
	poll(t, bctx, "the log tail grows", fmt.Sprintf(`document.getElementById('log').textContent.length > %d + 60`, n1), 30*time.Second)
	n2 := js[int](t, bctx, `document.getElementById('log').textContent.length`)
	shot(t, bctx, "web-command.png")

	// Stop from the page, with its confirmation.
	rec, err := c.Command(ctx, id)
	if err != nil || rec.Workload == nil {
		t.Fatalf("the command's record: %+v %v", rec, err)
	}
	pid := rec.Workload.PID
	js[chromedp.Void](t, bctx, `document.getElementById('stop-cmd').click()`)
	poll(t, bctx, "the confirmation", `document.getElementById('confirm').open && document.getElementById('confirm-text').textContent.startsWith('Stop command')`, 10*time.Second)
	if syscall.Kill(pid, 0) != nil {
		t.Fatalf("the command (pid %d) ended before the stop was confirmed", pid)
	}
	if err := chromedp.Do(bctx, chromedp.Click(`#confirm-yes`)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(60 * time.Second)
	for syscall.Kill(pid, 0) == nil || !errors.Is(syscall.Kill(pid, 0), syscall.ESRCH) {
		if time.Now().After(deadline) {
			t.Fatalf("the leader (pid %d) is still there 60s after the page's stop", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for {
		if rec, err = c.Command(ctx, id); err != nil {
			t.Fatal(err)
		}
		if rec.TreeState == "exited" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the page's stop: tree %s, reason %s; want exited", rec.TreeState, rec.StopReason)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if rec.StopReason != "user" || !rec.StoppedByHostfork {
		t.Errorf("after the page's stop: reason %q, stopped by hostfork %v; want user, true", rec.StopReason, rec.StoppedByHostfork)
	}
	poll(t, bctx, "the page says the tree ended", `document.getElementById('detail').textContent.includes('its tree has ended')`, 30*time.Second)

	// A terminal session, read-only through xterm.js.
	tty, err := c.Run(ctx, client.RunRequest{Env: map[string]any{"lifetime": map[string]any{"max_runtime": "10m"}},
		Command: client.CommandRequest{Argv: []string{"sh", "-c", `printf '\033[1mBOLD\033[0m hello-tty\n'; exec sleep 600`}, TTY: true, Cols: 80, Rows: 24}})
	if err != nil {
		t.Fatal(err)
	}
	tid := tty.Commands[0].ID
	poll(t, bctx, "the session's command shows", fmt.Sprintf(`!!document.querySelector('#cmds .cmd[data-id=%q]')`, tid), 15*time.Second)
	js[chromedp.Void](t, bctx, fmt.Sprintf(`document.querySelector('#cmds .cmd[data-id=%q]').click()`, tid))
	poll(t, bctx, "the terminal shows the session", `!!document.querySelector('#term .xterm') && document.getElementById('term').textContent.includes('BOLD hello-tty')`, 30*time.Second)

	// 400 px wide: nothing wider than the screen.
	if err := chromedp.Do(bctx, chromedp.EmulateViewport(400, 860)); err != nil {
		t.Fatal(err)
	}
	poll(t, bctx, "the page fits 400 px", `document.documentElement.scrollWidth <= 400`, 10*time.Second)
	shot(t, bctx, "web-phone.png")

	// The server's CPU with the page open: while environments are active
	// (the page reads their counters every 2 s), then with none.
	spid := s.Cmd.Process.Pid
	idle := func(what string) {
		t.Helper()
		const span = 10 * time.Second
		c0 := procCPU(t, spid)
		time.Sleep(span)
		share := float64(procCPU(t, spid)-c0) / float64(span)
		t.Logf("server CPU with the page open, %s: %.2f %% of a core over %s (issue 40 asks <= 1 %% when nothing happens)", what, share*100, span)
		if share > 0.10 {
			t.Errorf("server CPU with the page open, %s: %.1f %% of a core (safety bound 10 %%)", what, share*100)
		}
	}
	idle("3 environments active")
	if out, err := e.CLI("stop", "--all", "--grace", "1s"); err != nil {
		t.Fatalf("stop --all: %v\n%s", err, out)
	}
	poll(t, bctx, "the page shows no environment", `document.querySelectorAll('#envs .env').length === 0`, 30*time.Second)
	idle("nothing active")

	if e := errs.take(); len(e) > 0 {
		t.Errorf("the browser reported errors:\n%s", strings.Join(e, "\n"))
	}
	t.Logf("log tail grew from %d to %d characters", n1, n2)
}

// procCPU is the user and system time process pid used so far
// (/proc/PID/stat, in clock ticks of 10 ms).
func procCPU(t *testing.T, pid int) time.Duration {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		t.Fatal(err)
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	var ut, st int64
	if _, err := fmt.Sscan(f[11], &ut); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Sscan(f[12], &st); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ut+st) * 10 * time.Millisecond
}

// TestWebTLS: with a certificate and its key the web view speaks TLS (on
// any address), prints an https URL, sets a Secure cookie, and takes the
// certificate's DNS name as a Host.
func TestWebTLS(t *testing.T) {
	e := servertest.New(t)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "node.test"}, DNSNames: []string{"node.test"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certFile, keyFile := filepath.Join(e.Dir, "cert.pem"), filepath.Join(e.Dir, "key.pem")
	if err := os.WriteFile(certFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kder}), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := e.Command("serve", "--web", "127.0.0.1:0", "--web-tls-cert", certFile).CombinedOutput(); err == nil || !strings.Contains(string(out), "--web-tls-key") {
		t.Errorf("a certificate without its key: %v\n%s; want a usage error", err, out)
	}
	s := e.Serve("--web", "127.0.0.1:0", "--web-tls-cert", certFile, "--web-tls-key", keyFile)
	u, err := url.Parse(s.Web)
	if err != nil || u.Scheme != "https" {
		t.Fatalf("the printed URL %q: want https", s.Web)
	}
	pool := x509.NewCertPool()
	pool.AddCert(must(x509.ParseCertificate(der)))
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	r, err := hc.Get(s.Web)
	if err != nil {
		t.Fatal(err)
	}
	r.Body.Close()
	if len(r.Cookies()) != 1 || !r.Cookies()[0].Secure || r.StatusCode != http.StatusSeeOther {
		t.Fatalf("the token over TLS: %d, cookies %+v; want 303 and a Secure cookie", r.StatusCode, r.Cookies())
	}
	// HTTP/1.1 only, also to a client offering h2 (its attach is a
	// WebSocket upgrade).
	h2 := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}, ForceAttemptHTTP2: true},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	if r, err := h2.Get(s.Web); err != nil {
		t.Fatal(err)
	} else if r.Body.Close(); r.ProtoMajor != 1 {
		t.Errorf("the web view over TLS to a client offering h2: %s, want HTTP/1.1", r.Proto)
	}
	token := u.Query().Get("token")
	for host, want := range map[string]int{"node.test:" + u.Port(): 200, "other.test:" + u.Port(): 403} {
		req, _ := http.NewRequest("GET", "https://127.0.0.1:"+u.Port()+"/v1/capacity", nil)
		req.Host = host
		req.Header.Set("Authorization", "Bearer "+token)
		req.Header.Set("Origin", "https://"+host)
		r, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		r.Body.Close()
		if r.StatusCode != want {
			t.Errorf("Host %s over TLS: %d, want %d", host, r.StatusCode, want)
		}
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// BenchmarkWebFirstRender measures the page's first render (records,
// capacity and environments drawn: the first-render mark) on a store
// that retains 1,000 commands, and the time to draw the list with the
// ended ones too (issue 40 asks <= 300 ms):
//
//	go test -run '^$' -bench WebFirstRender -benchtime 5x ./internal/server
func BenchmarkWebFirstRender(b *testing.B) {
	_, s, base, token := startWeb(b)
	c, err := client.New("unix://" + s.Socket)
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	env, err := c.CreateEnv(ctx, map[string]any{"lifetime": map[string]any{"max_runtime": "1h"}, "purpose": "many commands"})
	if err != nil {
		b.Fatal(err)
	}
	var last string
	for i := 0; i < 1000; i++ {
		cmd, err := c.StartCommand(ctx, env.ID, client.CommandRequest{Argv: []string{"/bin/true"}, Purpose: fmt.Sprintf("command %d", i)})
		if err != nil {
			b.Fatal(err)
		}
		last = cmd.ID
	}
	if _, err := c.Wait(ctx, last, client.WaitTree); err != nil {
		b.Fatal(err)
	}
	bctx, _ := browser(b, 1280, 900)
	if err := chromedp.Do(bctx, chromedp.Navigate(base.String()+"?token="+token)); err != nil {
		b.Fatal(err)
	}
	var first, ended []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := chromedp.Do(bctx, chromedp.Navigate(base.String())); err != nil {
			b.Fatal(err)
		}
		poll(b, bctx, "the first render", `performance.getEntriesByName('first-render').length === 1`, time.Minute)
		first = append(first, time.Duration(js[float64](b, bctx, `performance.getEntriesByName('first-render')[0].startTime`)*float64(time.Millisecond)))
		b.Logf("resources (name, start ms, duration ms): %s", js[string](b, bctx, `JSON.stringify(performance.getEntriesByType('resource').map((e) => [e.name.replace(location.origin, ''), Math.round(e.startTime), Math.round(e.duration)]))`))
		js[chromedp.Void](b, bctx, `document.getElementById('show-ended').click()`)
		ended = append(ended, poll(b, bctx, "the ended commands", `document.querySelectorAll('#cmds .cmd').length === 300`, time.Minute))
	}
	b.StopTimer()
	b.ReportMetric(ms(median(first)), "first-render-ms")
	b.ReportMetric(ms(median(ended)), "ended-list-ms")
	b.Logf("n=%d, 1000 retained commands: first render %.0f ms, the list with the ended ones %.0f ms (medians)", b.N, ms(median(first)), ms(median(ended)))
}
