package engine

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/planner"
	"github.com/habemus-papadum/hostfork/internal/records"
	"github.com/habemus-papadum/hostfork/internal/registry"
	"github.com/habemus-papadum/hostfork/internal/store"
)

// Options configure an Engine.
type Options struct {
	// Root is the store directory (absolute after DefaultRoot).
	Root string
	// CgroupParent is the cgroup2 directory under which environments get
	// their groups; "" means $HOSTFORK_CGROUP_PARENT, else <cgroup2
	// mount>/hostfork for root, else the user's delegated subtree.
	CgroupParent string
	// Exe is the program re-executed as the guardian and the keeper; ""
	// means /proc/self/exe (every binary that links the library carries
	// the C helpers).
	Exe string
}

// Capabilities is what the host offers for ownership.
type Capabilities = api.Capabilities

// Engine is one open store.
type Engine struct {
	root string
	reg  *records.Records
	opts Options

	capOnce sync.Once
	caps    Capabilities

	mu sync.Mutex
	// running are the launches of this process, by command id: their
	// watchers record their results.
	running map[string]*Running

	closed    chan struct{}
	closeOnce sync.Once
}

// Open validates the store at opts.Root (creating it if needed) and opens
// its registry.
func Open(ctx context.Context, opts Options) (*Engine, error) {
	root, err := store.Prepare(opts.Root)
	if err != nil {
		return nil, err
	}
	reg, err := registry.Open(ctx, root)
	if err != nil {
		return nil, fmt.Errorf("%v: %w", err, api.ErrStore)
	}
	if err := store.CheckRegistry(ctx, root, reg); err != nil {
		reg.Close()
		return nil, err
	}
	store.EnsureConfig(root)
	opts.Exe = cmp.Or(opts.Exe, "/proc/self/exe")
	opts.Root = root
	return &Engine{root: root, reg: records.New(reg, root), opts: opts, running: map[string]*Running{}, closed: make(chan struct{})}, nil
}

// Root is the store directory.
func (e *Engine) Root() string { return e.root }

// Registry gives tests and the public layer read access.
func (e *Engine) Registry() *registry.DB { return e.reg.DB }

// Close releases the registry. Launches of this process keep running
// under their owner-exit policy; their pending waits return ErrClosed.
func (e *Engine) Close() error {
	var err error
	e.closeOnce.Do(func() {
		e.recordObserved()
		close(e.closed)
		err = e.reg.Close()
	})
	return err
}

// recordObserved records, in one commit, the workload identities this
// process learnt from its guardians' own channels for commands it leaves
// running (a detached start): a later reader can then prove the leader's
// exit from the kernel instead of taking a live guardian's receipt at its
// word (decide.Evidence). Nothing else of a live command is recorded here.
func (e *Engine) recordObserved() {
	e.mu.Lock()
	rs := make([]*Running, 0, len(e.running))
	for _, r := range e.running {
		rs = append(rs, r)
	}
	e.mu.Unlock()
	type todo struct {
		base api.Command
		obs  *api.Identity
	}
	var list []todo
	for _, r := range rs {
		r.mu.Lock()
		obs, base, finishing := *r.rec, r.committed, r.finishing
		r.mu.Unlock()
		if !finishing && obs.Workload != nil && base.Workload == nil && base.Rev > 0 {
			list = append(list, todo{base, obs.Workload})
		}
	}
	if len(list) == 0 {
		return
	}
	with := func(base api.Command, id *api.Identity) *api.Command {
		next := base
		next.Workload = id
		if next.LeaderState == api.PhasePending {
			next.LeaderState = api.PhaseLive
		}
		return &next
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var b registry.Batch
	for _, t := range list {
		b.UpdateCommand(&t.base, with(t.base, t.obs))
	}
	if err := e.reg.Commit(ctx, &b); !errors.Is(err, registry.ErrConflict) {
		return // recorded, or best effort: a reader can still verify the workload while it lives
	}
	// Someone recorded first (a reader settled one): one by one, from
	// what is recorded now.
	for _, t := range list {
		cur, err := e.reg.Command(ctx, t.base.ID)
		if err != nil || cur.Final() || cur.Workload != nil {
			continue
		}
		var b registry.Batch
		b.UpdateCommand(cur, with(*cur, t.obs))
		_ = e.reg.Commit(ctx, &b)
	}
}

// Closed is closed when Close was called.
func (e *Engine) Closed() <-chan struct{} { return e.closed }

func (e *Engine) isClosed() bool {
	select {
	case <-e.closed:
		return true
	default:
		return false
	}
}

// checkOpen fails with ErrClosed after Close.
func (e *Engine) checkOpen() error {
	if e.isClosed() {
		return api.ErrClosed
	}
	return nil
}

// Capabilities probes (once) what ownership tiers this host offers.
func (e *Engine) Capabilities() Capabilities {
	e.capOnce.Do(func() { e.caps = planner.ProbeCapabilities(e.opts.CgroupParent) })
	return e.caps
}

// newID returns a short random id: 10 characters of lowercase base32hex,
// 5 random bits each.
func newID() string {
	const alphabet = "0123456789abcdefghijklmnopqrstuv"
	var b [10]byte
	_, _ = rand.Read(b[:])
	for i := range b {
		b[i] = alphabet[b[i]&31]
	}
	return string(b[:])
}

func (e *Engine) track(r *Running) {
	e.mu.Lock()
	e.running[r.id] = r
	e.mu.Unlock()
}

func (e *Engine) untrack(id string) {
	e.mu.Lock()
	delete(e.running, id)
	e.mu.Unlock()
}

// runningOf is this process's launch of command id, if any.
func (e *Engine) runningOf(id string) *Running {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.running[id]
}

// Running is this process's launch of command id (nil: none).
func (e *Engine) Running(id string) *Running { return e.runningOf(id) }
