package e2b

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os/user"
	"path"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/habemus-papadum/hostfork"
	"github.com/habemus-papadum/hostfork/internal/e2b/envdpb/filesystem"
	"github.com/habemus-papadum/hostfork/internal/e2b/envdpb/filesystem/filesystemconnect"
)

// Bounds of the polling watchers (CreateWatcher): per sandbox, the events
// one keeps until they are fetched (older ones are dropped), and how long
// one lives without being polled.
const (
	maxWatchers      = 16
	maxWatcherEvents = 4096
	watcherIdle      = 10 * time.Minute
)

// fsService is filesystem.Filesystem over the library's files calls: every
// path is resolved inside the sandbox's view (Env.Stat, ReadDir, ...).
type fsService struct {
	filesystemconnect.UnimplementedFilesystemHandler
	s        *Server
	mu       sync.Mutex
	watchers map[string]*watcher
	sweeping bool // a sweeper runs (while there are watchers)
}

func newFSService(s *Server) *fsService {
	return &fsService{s: s, watchers: map[string]*watcher{}}
}

// watcher is one polling watcher: a watch of its own, whose events wait
// for GetWatcherEvents.
type watcher struct {
	sandbox string
	cancel  context.CancelFunc
	mu      sync.Mutex
	events  []*filesystem.FilesystemEvent // the newest maxWatcherEvents
	err     error                         // the watch ended with it
	polled  time.Time
}

// entryInfo is E2B's description of a file.
func entryInfo(abs string, e hostfork.DirEntry) *filesystem.EntryInfo {
	info := &filesystem.EntryInfo{
		Name:         path.Base(abs),
		Path:         abs,
		Size:         e.Size,
		Mode:         permBits(e.Mode),
		Permissions:  e.Mode,
		Owner:        userName(e.UID),
		Group:        groupName(e.GID),
		ModifiedTime: timestamppb.New(e.ModTime),
	}
	switch e.Type {
	case "file":
		info.Type = filesystem.FileType_FILE_TYPE_FILE
	case "dir":
		info.Type = filesystem.FileType_FILE_TYPE_DIRECTORY
	case "symlink":
		info.Type = filesystem.FileType_FILE_TYPE_SYMLINK
		t := e.Target
		info.SymlinkTarget = &t
	}
	return info
}

// permBits reads the permission bits back from ls -l's mode string (its
// last nine characters).
func permBits(mode string) uint32 {
	if len(mode) < 9 {
		return 0
	}
	var m uint32
	for i, c := range mode[len(mode)-9:] {
		if c != '-' {
			m |= 1 << (8 - i)
		}
	}
	return m
}

func userName(uid uint32) string {
	if u, err := user.LookupId(strconv.Itoa(int(uid))); err == nil {
		return u.Username
	}
	return strconv.Itoa(int(uid))
}

func groupName(gid uint32) string {
	if g, err := user.LookupGroupId(strconv.Itoa(int(gid))); err == nil {
		return g.Name
	}
	return strconv.Itoa(int(gid))
}

// stat describes abs as an entry.
func stat(ctx context.Context, env *hostfork.Env, abs string) (*filesystem.EntryInfo, error) {
	e, err := env.Stat(ctx, abs)
	if err != nil {
		return nil, rpcErr(err)
	}
	return entryInfo(abs, e), nil
}

// statMade describes abs after a call made it (MakeDir, Move); a link whose
// target is not in the view is the link itself, from its directory's
// listing (which never follows links).
func statMade(ctx context.Context, env *hostfork.Env, abs string) (*filesystem.EntryInfo, error) {
	e, err := stat(ctx, env, abs)
	if connect.CodeOf(err) == connect.CodeNotFound {
		es, lerr := env.ReadDir(ctx, path.Dir(abs), 1)
		for _, le := range es {
			if lerr == nil && le.Path == path.Base(abs) {
				e, err = entryInfo(abs, le), nil
			}
		}
	}
	return e, err
}

func (f *fsService) Stat(ctx context.Context, req *connect.Request[filesystem.StatRequest]) (*connect.Response[filesystem.StatResponse], error) {
	return unary(ctx, req, func(env *hostfork.Env, _ string, m *filesystem.StatRequest) (*filesystem.StatResponse, error) {
		e, err := stat(ctx, env, sandboxPath(m.GetPath()))
		return &filesystem.StatResponse{Entry: e}, err
	})
}

func (f *fsService) ListDir(ctx context.Context, req *connect.Request[filesystem.ListDirRequest]) (*connect.Response[filesystem.ListDirResponse], error) {
	return unary(ctx, req, func(env *hostfork.Env, _ string, m *filesystem.ListDirRequest) (*filesystem.ListDirResponse, error) {
		dir, err := viewDir(ctx, env, "list", m.GetPath())
		if err != nil {
			return nil, err
		}
		es, err := env.ReadDir(ctx, dir, int(max(m.GetDepth(), 1)))
		if err != nil {
			return nil, rpcErr(err)
		}
		out := &filesystem.ListDirResponse{}
		for _, e := range es {
			out.Entries = append(out.Entries, entryInfo(path.Join(dir, e.Path), e))
		}
		return out, nil
	})
}

// MakeDir makes the directory and its missing parents; an existing one is
// already_exists (the SDK's makeDir then answers false).
func (f *fsService) MakeDir(ctx context.Context, req *connect.Request[filesystem.MakeDirRequest]) (*connect.Response[filesystem.MakeDirResponse], error) {
	return unary(ctx, req, func(env *hostfork.Env, _ string, m *filesystem.MakeDirRequest) (*filesystem.MakeDirResponse, error) {
		dir := sandboxPath(m.GetPath())
		made, err := mkdirAll(ctx, env, dir)
		if err != nil {
			return nil, rpcErr(err)
		}
		if !made {
			return nil, connect.NewError(connect.CodeAlreadyExists, fmt.Errorf("directory %s already exists", dir))
		}
		e, err := statMade(ctx, env, dir)
		return &filesystem.MakeDirResponse{Entry: e}, err
	})
}

// Move renames source to destination (making destination's missing
// directories), replacing a file there.
func (f *fsService) Move(ctx context.Context, req *connect.Request[filesystem.MoveRequest]) (*connect.Response[filesystem.MoveResponse], error) {
	return unary(ctx, req, func(env *hostfork.Env, _ string, m *filesystem.MoveRequest) (*filesystem.MoveResponse, error) {
		src, dst := sandboxPath(m.GetSource()), sandboxPath(m.GetDestination())
		if _, err := mkdirAll(ctx, env, path.Dir(dst)); err != nil {
			return nil, rpcErr(err)
		}
		if err := env.Rename(ctx, src, dst); err != nil {
			return nil, rpcErr(err)
		}
		e, err := statMade(ctx, env, dst)
		return &filesystem.MoveResponse{Entry: e}, err
	})
}

// Remove removes a file, a link (never its target) or a directory with
// everything below it.
func (f *fsService) Remove(ctx context.Context, req *connect.Request[filesystem.RemoveRequest]) (*connect.Response[filesystem.RemoveResponse], error) {
	return unary(ctx, req, func(env *hostfork.Env, _ string, m *filesystem.RemoveRequest) (*filesystem.RemoveResponse, error) {
		return &filesystem.RemoveResponse{}, rpcErr(env.Remove(ctx, sandboxPath(m.GetPath())))
	})
}

// fsEvent converts a library file event; nil for those E2B has no name for
// (ready, overflow).
func fsEvent(dir string, ev hostfork.FileEvent) *filesystem.FilesystemEvent {
	var t filesystem.EventType
	switch ev.Op {
	case "create":
		t = filesystem.EventType_EVENT_TYPE_CREATE
	case "write":
		t = filesystem.EventType_EVENT_TYPE_WRITE
	case "remove":
		t = filesystem.EventType_EVENT_TYPE_REMOVE
	case "rename":
		t = filesystem.EventType_EVENT_TYPE_RENAME
	case "attrib":
		t = filesystem.EventType_EVENT_TYPE_CHMOD
	default:
		return nil
	}
	if writeTemp.MatchString(path.Base(ev.Path)) {
		return nil // a write's own temporary file (see Env.WriteFile)
	}
	name := strings.TrimPrefix(strings.TrimPrefix(ev.Path, dir), "/")
	if name == "" {
		name = path.Base(dir)
	}
	return &filesystem.FilesystemEvent{Name: name, Type: t}
}

// writeTemp matches the temporary file a write makes beside its file
// before renaming it over it (safefs.Root.WriteFile): not the sandbox's
// own file, so its events are not reported.
var writeTemp = regexp.MustCompile(`^\.(.+\.)?hostfork-[0-9a-f]{12}$`)

// viewDir is p in the view, checked to be a directory there, for a clear
// error before a list or a watch starts.
func viewDir(ctx context.Context, env *hostfork.Env, verb, p string) (string, error) {
	dir := sandboxPath(p)
	e, err := env.Stat(ctx, dir)
	if err != nil {
		return "", rpcErr(err)
	}
	if e.Type != "dir" {
		return "", badArg("%s %s: not a directory", verb, dir)
	}
	return dir, nil
}

func (f *fsService) WatchDir(ctx context.Context, req *connect.Request[filesystem.WatchDirRequest], stream *connect.ServerStream[filesystem.WatchDirResponse]) error {
	env, _, err := envdOf(ctx)
	if err != nil {
		return err
	}
	dir, err := viewDir(ctx, env, "watch", req.Msg.GetPath())
	if err != nil {
		return err
	}
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type item struct {
		ev  hostfork.FileEvent
		err error
	}
	ch := make(chan item)
	go func() {
		defer close(ch)
		for ev, err := range env.Watch(wctx, dir, req.Msg.GetRecursive()) {
			select {
			case ch <- item{ev, err}:
			case <-wctx.Done():
				return
			}
		}
	}()
	var tick <-chan time.Time
	if ka := keepalive(req.Header()); ka > 0 {
		t := time.NewTicker(ka)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case it, ok := <-ch:
			if !ok {
				return rpcErr(ctx.Err())
			}
			if it.err != nil {
				return rpcErr(it.err)
			}
			var resp *filesystem.WatchDirResponse
			if it.ev.Op == "ready" {
				resp = &filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Start{Start: &filesystem.WatchDirResponse_StartEvent{}}}
			} else if e := fsEvent(dir, it.ev); e != nil {
				resp = &filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Filesystem{Filesystem: e}}
			} else {
				continue
			}
			if err := stream.Send(resp); err != nil {
				return err
			}
		case <-tick:
			if err := stream.Send(&filesystem.WatchDirResponse{Event: &filesystem.WatchDirResponse_Keepalive{Keepalive: &filesystem.WatchDirResponse_KeepAlive{}}}); err != nil {
				return err
			}
		case <-ctx.Done():
			return rpcErr(ctx.Err())
		}
	}
}

// CreateWatcher starts a polling watcher: its events wait (at most
// maxWatcherEvents, older ones dropped) for GetWatcherEvents. A sandbox
// has at most maxWatchers; one not polled for watcherIdle is removed.
func (f *fsService) CreateWatcher(ctx context.Context, req *connect.Request[filesystem.CreateWatcherRequest]) (*connect.Response[filesystem.CreateWatcherResponse], error) {
	env, sb, err := envdOf(ctx)
	if err != nil {
		return nil, err
	}
	dir, err := viewDir(ctx, env, "watch", req.Msg.GetPath())
	if err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.sweepLocked()
	n := 0
	for _, w := range f.watchers {
		if w.sandbox == sb {
			n++
		}
	}
	f.mu.Unlock()
	if n >= maxWatchers {
		return nil, connect.NewError(connect.CodeResourceExhausted, fmt.Errorf("sandbox %s has %d watchers, the most it may have: remove one (RemoveWatcher)", sb, n))
	}
	var idb [12]byte
	_, _ = rand.Read(idb[:])
	id := hex.EncodeToString(idb[:])
	wctx, cancel := context.WithCancel(context.Background())
	w := &watcher{sandbox: sb, cancel: cancel, polled: time.Now()}
	ready := make(chan error, 1)
	go func() {
		defer cancel()
		started := false
		for ev, err := range env.Watch(wctx, dir, req.Msg.GetRecursive()) {
			if err != nil {
				if !started {
					ready <- err
					return
				}
				w.mu.Lock()
				w.err = err
				w.mu.Unlock()
				return
			}
			if ev.Op == "ready" {
				started = true
				ready <- nil
				continue
			}
			e := fsEvent(dir, ev)
			if e == nil {
				continue
			}
			w.mu.Lock()
			if len(w.events) >= maxWatcherEvents {
				w.events = w.events[1:]
			}
			w.events = append(w.events, e)
			w.mu.Unlock()
		}
		if !started {
			ready <- wctx.Err()
		}
	}()
	select {
	case err := <-ready:
		if err != nil {
			cancel()
			return nil, rpcErr(err)
		}
	case <-ctx.Done():
		cancel()
		return nil, rpcErr(ctx.Err())
	}
	f.mu.Lock()
	f.watchers[id] = w
	if !f.sweeping {
		f.sweeping = true
		go f.sweeper()
	}
	f.mu.Unlock()
	return connect.NewResponse(&filesystem.CreateWatcherResponse{WatcherId: id}), nil
}

// sweeper removes idle watchers every minute, also when nobody calls,
// until there are none.
func (f *fsService) sweeper() {
	for {
		time.Sleep(time.Minute)
		f.mu.Lock()
		f.sweepLocked()
		if len(f.watchers) == 0 {
			f.sweeping = false
			f.mu.Unlock()
			return
		}
		f.mu.Unlock()
	}
}

// sweepLocked removes the watchers nobody polled for watcherIdle.
func (f *fsService) sweepLocked() {
	for id, w := range f.watchers {
		w.mu.Lock()
		idle := time.Since(w.polled) > watcherIdle
		w.mu.Unlock()
		if idle {
			w.cancel()
			delete(f.watchers, id)
		}
	}
}

// watcherOf finds the sandbox's watcher id (another sandbox's is not
// found).
func (f *fsService) watcherOf(sb, id string) (*watcher, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sweepLocked()
	w, ok := f.watchers[id]
	if !ok || w.sandbox != sb {
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("watcher %q not found (removed, or not polled for %v)", id, watcherIdle))
	}
	return w, nil
}

func (f *fsService) GetWatcherEvents(ctx context.Context, req *connect.Request[filesystem.GetWatcherEventsRequest]) (*connect.Response[filesystem.GetWatcherEventsResponse], error) {
	return unary(ctx, req, func(_ *hostfork.Env, sb string, m *filesystem.GetWatcherEventsRequest) (*filesystem.GetWatcherEventsResponse, error) {
		w, err := f.watcherOf(sb, m.GetWatcherId())
		if err != nil {
			return nil, err
		}
		w.mu.Lock()
		defer w.mu.Unlock()
		w.polled = time.Now()
		evs, werr := w.events, w.err
		w.events = nil
		if werr != nil && len(evs) == 0 {
			return nil, rpcErr(fmt.Errorf("watcher %s ended: %w", m.GetWatcherId(), werr))
		}
		return &filesystem.GetWatcherEventsResponse{Events: evs}, nil
	})
}

func (f *fsService) RemoveWatcher(ctx context.Context, req *connect.Request[filesystem.RemoveWatcherRequest]) (*connect.Response[filesystem.RemoveWatcherResponse], error) {
	return unary(ctx, req, func(_ *hostfork.Env, sb string, m *filesystem.RemoveWatcherRequest) (*filesystem.RemoveWatcherResponse, error) {
		w, err := f.watcherOf(sb, m.GetWatcherId())
		if err != nil {
			return nil, err
		}
		w.cancel()
		f.mu.Lock()
		delete(f.watchers, m.GetWatcherId())
		f.mu.Unlock()
		return &filesystem.RemoveWatcherResponse{}, nil
	})
}
