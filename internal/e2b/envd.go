package e2b

// envd: the in-sandbox API of E2B's SDKs, answered over the library for
// the sandbox an envd request names (docs/decisions/140-e2b-envd-processes-are-commands.md, 141).
// Connect RPC (connect-go: the JSON and proto codecs, unary and server
// streams) for process.Process and filesystem.Filesystem, and plain HTTP
// for /health and /files. Every call is authenticated with the sandbox's
// own access token (envdSandbox) before anything of the sandbox is read.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/user"
	"path"
	"strconv"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/e2b/envdpb/filesystem/filesystemconnect"
	"github.com/habemus-papadum/hostfork/internal/e2b/envdpb/process/processconnect"
)

// LabelTag is the label that keeps a command's E2B tag.
const LabelTag = "e2b.tag"

// maxRPCBytes bounds one RPC message (a SendInput's data is the largest).
const maxRPCBytes = 4 << 20

// DefaultMaxUpload is the largest file POST /files takes when
// Config.MaxUpload is 0.
const DefaultMaxUpload = 1 << 30

// envdRoutes registers envd's handlers on s.envd.
func (s *Server) envdRoutes() {
	opts := []connect.HandlerOption{connect.WithReadMaxBytes(maxRPCBytes)}
	p, h := processconnect.NewProcessHandler(&procService{s: s}, opts...)
	s.envd.Handle(p, s.withSandbox(h))
	p, h = filesystemconnect.NewFilesystemHandler(newFSService(s), opts...)
	s.envd.Handle(p, s.withSandbox(h))
	s.envd.HandleFunc("GET /health", s.health)
	s.envd.Handle("GET /files", s.withSandbox(http.HandlerFunc(s.download)))
	s.envd.Handle("POST /files", s.withSandbox(http.HandlerFunc(s.upload)))
}

// sandboxKey carries a request's authenticated sandbox (or why not) from
// withSandbox to the handlers.
type sandboxKey struct{}

type sandboxOf struct {
	id  string
	env *hostfork.Env
	err error
}

// withSandbox authenticates the request and opens its sandbox's
// environment before h runs; h answers the failure in its own protocol
// (a Connect error, or the HTTP API's {code, message}).
func (s *Server) withSandbox(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		env, err := s.envdSandbox(r)
		if err == nil {
			err = s.checkUser(r)
		}
		sb := sandboxOf{id: r.Header.Get(hdrSandboxID), env: env, err: err}
		h.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), sandboxKey{}, sb)))
	})
}

// envdOf returns the request's environment, or its failure as a Connect
// error.
func envdOf(ctx context.Context) (*hostfork.Env, string, error) {
	sb, ok := ctx.Value(sandboxKey{}).(sandboxOf)
	if !ok {
		return nil, "", connect.NewError(connect.CodeInternal, errors.New("e2b: an envd handler without its sandbox"))
	}
	if sb.err != nil {
		return nil, sb.id, authErr(sb.err)
	}
	return sb.env, sb.id, nil
}

// unary answers a unary envd RPC with fn's answer, run on the request's
// sandbox: the sandbox's failure (a wrong token, a gone sandbox) comes
// first.
func unary[Req, Resp any](ctx context.Context, req *connect.Request[Req], fn func(env *hostfork.Env, sb string, m *Req) (*Resp, error)) (*connect.Response[Resp], error) {
	env, sb, err := envdOf(ctx)
	if err != nil {
		return nil, err
	}
	out, err := fn(env, sb, req.Msg)
	if err != nil {
		return nil, err
	}
	return connect.NewResponse(out), nil
}

// authErr is a failure of withSandbox as a Connect error: a missing or
// wrong token is unauthenticated, a gone sandbox not_found, another user
// permission_denied.
func authErr(err error) error {
	var ue userErr
	switch {
	case errors.As(err, &ue):
		return connect.NewError(connect.CodePermissionDenied, err)
	case errors.Is(err, api.ErrForbidden):
		return connect.NewError(connect.CodeUnauthenticated, err)
	}
	return rpcErr(err)
}

// rpcErr maps a library error to its Connect code.
func rpcErr(err error) error {
	var ce *connect.Error
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ce):
		return err
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, err)
	case errors.Is(err, api.ErrNotFound), errors.Is(err, api.ErrEnvNotActive):
		return connect.NewError(connect.CodeNotFound, err)
	case errors.Is(err, api.ErrExists):
		return connect.NewError(connect.CodeAlreadyExists, err)
	case errors.Is(err, api.ErrInvalid), errors.Is(err, api.ErrExecutableNotFound), errors.Is(err, api.ErrNotExecutable),
		errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR), errors.Is(err, syscall.EXDEV):
		return connect.NewError(connect.CodeInvalidArgument, err)
	case errors.Is(err, api.ErrForbidden), errors.Is(err, os.ErrPermission), errors.Is(err, syscall.EROFS):
		return connect.NewError(connect.CodePermissionDenied, err)
	case errors.Is(err, api.ErrNoSession), errors.Is(err, api.ErrCommandFinished):
		return connect.NewError(connect.CodeFailedPrecondition, err)
	case errors.Is(err, api.ErrStoreFull), errors.Is(err, syscall.ENOSPC), errors.Is(err, api.ErrAdmissionRefused):
		return connect.NewError(connect.CodeResourceExhausted, err)
	case errors.Is(err, api.ErrClosed):
		return connect.NewError(connect.CodeUnavailable, err)
	}
	return connect.NewError(connect.CodeInternal, err)
}

// badArg is an invalid_argument Connect error.
func badArg(format string, args ...any) error {
	return connect.NewError(connect.CodeInvalidArgument, fmt.Errorf(format, args...))
}

// userErr: the request names a user other than the server's.
type userErr struct{ msg string }

func (e userErr) Error() string { return e.msg }

// checkUser refuses a request for another user than the server's: the
// Authorization header's Basic user, or the files API's username. A
// hostfork sandbox runs its commands as the server's user.
func (s *Server) checkUser(r *http.Request) error {
	var names []string
	if u, _, ok := r.BasicAuth(); ok && u != "" {
		names = append(names, u)
	}
	if u := r.URL.Query().Get("username"); u != "" {
		names = append(names, u)
	}
	me := serverUser()
	for _, n := range names {
		if n != me {
			return userErr{fmt.Sprintf("user %q: a hostfork sandbox runs everything as the server's user %q; omit the user, or give %q", n, me, me)}
		}
	}
	return nil
}

// serverUser is this process's user name (its uid if it has none).
func serverUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return u.Username
	}
	return strconv.Itoa(os.Geteuid())
}

// home is the directory relative paths start from, as E2B's envd
// resolves them against the user's home.
func home() string {
	if h, err := os.UserHomeDir(); err == nil && path.IsAbs(h) {
		return h
	}
	return "/"
}

// sandboxPath makes an SDK's path absolute in the sandbox's view: "~"
// and relative paths start at the server user's home.
func sandboxPath(p string) string {
	switch {
	case p == "" || p == "~":
		return home()
	case strings.HasPrefix(p, "~/"):
		return path.Join(home(), p[2:])
	case !path.IsAbs(p):
		return path.Join(home(), p)
	}
	return path.Clean(p)
}

// mkdirAll makes directory dir and its missing parents in env's view, as
// the SDK's writes and makeDir expect; it reports whether dir was made.
func mkdirAll(ctx context.Context, env *hostfork.Env, dir string) (bool, error) {
	dir = path.Clean(dir)
	if e, err := env.Stat(ctx, dir); err == nil {
		if e.Type != "dir" {
			return false, fmt.Errorf("%s exists and is not a directory: %w", dir, api.ErrInvalid)
		}
		return false, nil
	}
	if dir != "/" {
		if _, err := mkdirAll(ctx, env, path.Dir(dir)); err != nil {
			return false, err
		}
	}
	err := env.Mkdir(ctx, dir, 0o755)
	if errors.Is(err, api.ErrExists) {
		return false, nil // made meanwhile
	}
	return err == nil, err
}

// keepalive is the interval the client asked for in Keepalive-Ping-Interval
// (seconds), 0 for none.
func keepalive(h http.Header) time.Duration {
	n, err := strconv.Atoi(h.Get("Keepalive-Ping-Interval"))
	if err != nil || n <= 0 {
		return 0
	}
	return time.Duration(max(n, 1)) * time.Second
}

// health answers GET /health: 204 while the sandbox runs, 401 without its
// token (the SDKs send it), and 502 once it is gone, which is what E2B's
// proxy answers for a sandbox that no longer runs and what the SDKs read
// as "the sandbox was killed".
func (s *Server) health(w http.ResponseWriter, r *http.Request) {
	_, err := s.envdSandbox(r)
	switch {
	case err == nil:
		w.WriteHeader(http.StatusNoContent)
	case errors.Is(err, api.ErrForbidden):
		fail(w, http.StatusUnauthorized, "%v", err)
	case errors.Is(err, api.ErrNotFound):
		fail(w, http.StatusBadGateway, "%v", err)
	default:
		fail(w, http.StatusInternalServerError, "%v", err)
	}
}
