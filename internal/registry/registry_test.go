package registry

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/api"
)

func open(t *testing.T) *DB {
	t.Helper()
	d, err := Open(context.Background(), t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

func commit(t *testing.T, d *DB, fill func(b *Batch)) error {
	t.Helper()
	var b Batch
	fill(&b)
	return d.Commit(context.Background(), &b)
}

func newEnv(id string) *api.Env {
	return &api.Env{ID: id, State: api.EnvActive, CreatedAt: time.Now().UTC(), Labels: map[string]string{}}
}

// A second record under an id or a name already taken is api.ErrExists,
// told apart by SQLite's constraint code, not by its message.
func TestDuplicateIsErrExists(t *testing.T) {
	d := open(t)
	if err := commit(t, d, func(b *Batch) { b.InsertEnv(newEnv("e")) }); err != nil {
		t.Fatal(err)
	}
	for name, fill := range map[string]func(b *Batch){
		"environment": func(b *Batch) { b.InsertEnv(newEnv("e")) },
		"command": func(b *Batch) {
			b.InsertCommand(&api.Command{ID: "c", Env: "e", State: api.CommandRunning, CreatedAt: time.Now()})
		},
		"baseline": func(b *Batch) { b.InsertBaseline(&api.Baseline{Name: "b", CreatedAt: time.Now()}) },
	} {
		if name != "environment" {
			if err := commit(t, d, fill); err != nil {
				t.Fatalf("first %s: %v", name, err)
			}
		}
		if err := commit(t, d, fill); !errors.Is(err, api.ErrExists) {
			t.Errorf("a second %s: %v, want api.ErrExists", name, err)
		}
	}
	// Any other constraint is not a duplicate.
	err := commit(t, d, func(b *Batch) {
		b.InsertCommand(&api.Command{ID: "c2", Env: "nosuch", State: api.CommandRunning, CreatedAt: time.Now()})
	})
	if err == nil || errors.Is(err, api.ErrExists) {
		t.Errorf("a command of a missing environment: %v, want a foreign-key error that is not api.ErrExists", err)
	}
}

func TestCompareAndSet(t *testing.T) {
	d := open(t)
	ctx := context.Background()
	if err := commit(t, d, func(b *Batch) { b.InsertEnv(newEnv("abc123")) }); err != nil {
		t.Fatal(err)
	}
	a, _ := d.Env(ctx, "abc123")
	b, _ := d.Env(ctx, "abc123")
	na := *a
	na.StopReason = api.ReasonUser
	if err := commit(t, d, func(bt *Batch) { bt.UpdateEnv(a, &na) }); err != nil {
		t.Fatal(err)
	}
	if na.Rev != 2 {
		t.Fatalf("rev after update = %d", na.Rev)
	}
	nb := *b
	nb.StopReason = api.ReasonDeadline
	err := commit(t, d, func(bt *Batch) { bt.UpdateEnv(b, &nb) })
	if !errors.Is(err, ErrConflict) || !errors.Is(err, api.ErrConflict) {
		t.Fatalf("late writer not fenced: %v", err)
	}
	got, _ := d.Env(ctx, "abc123")
	if got.StopReason != api.ReasonUser || got.Rev != 2 {
		t.Fatalf("got %+v", got)
	}
}

// A failed precondition or a stale revision anywhere in a batch leaves
// nothing of the batch applied.
func TestBatchIsAtomic(t *testing.T) {
	d := open(t)
	ctx := context.Background()
	if err := commit(t, d, func(b *Batch) { b.InsertEnv(newEnv("e1")) }); err != nil {
		t.Fatal(err)
	}
	err := commit(t, d, func(b *Batch) {
		b.InsertCommand(&api.Command{ID: "c1", Env: "e1", State: api.CommandReserved, CreatedAt: time.Now()})
		b.RequireEnv("e1", []api.EnvState{api.EnvStopping}, "", 0)
	})
	if !errors.Is(err, ErrConflict) || !errors.Is(err, api.ErrEnvNotActive) {
		t.Fatalf("precondition: %v", err)
	}
	if _, err := d.Command(ctx, "c1"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("command of a failed batch exists: %v", err)
	}
}

func TestRequireEnvDeadline(t *testing.T) {
	d := open(t)
	e := newEnv("e1")
	e.BootID, e.DeadlineMono, e.Grace = "b", 10*time.Second, api.Duration(2*time.Second)
	if err := commit(t, d, func(b *Batch) { b.InsertEnv(e) }); err != nil {
		t.Fatal(err)
	}
	ok := []api.EnvState{api.EnvActive}
	for _, c := range []struct {
		boot string
		now  time.Duration
		want bool
	}{{"b", 7 * time.Second, true}, {"b", 8 * time.Second, false}, {"other", 9 * time.Second, true}, {"b", 0, true}} {
		err := commit(t, d, func(b *Batch) { b.RequireEnv("e1", ok, c.boot, c.now); b.SetSetting("x", "y") })
		if (err == nil) != c.want {
			t.Errorf("boot %s now %v: %v", c.boot, c.now, err)
		}
	}
}

func TestResolvePrefix(t *testing.T) {
	d := open(t)
	ctx := context.Background()
	err := commit(t, d, func(b *Batch) {
		b.InsertEnv(newEnv("aa11"))
		b.InsertEnv(newEnv("aa22"))
		b.InsertCommand(&api.Command{ID: "bb11", Env: "aa11", State: api.CommandRunning, CreatedAt: time.Now()})
	})
	if err != nil {
		t.Fatal(err)
	}
	if k, id, err := d.Resolve(ctx, "bb"); err != nil || k != "command" || id != "bb11" {
		t.Fatalf("bb: %s %s %v", k, id, err)
	}
	if _, _, err := d.Resolve(ctx, "aa"); !errors.Is(err, api.ErrAmbiguous) {
		t.Fatalf("aa: %v", err)
	}
	if k, id, err := d.Resolve(ctx, "aa11"); err != nil || k != "env" || id != "aa11" {
		t.Fatalf("exact: %s %s %v", k, id, err)
	}
	if _, _, err := d.Resolve(ctx, "a%"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("wildcard matched: %v", err)
	}
	for _, p := range []string{"a_", "_", "%", "\\", "aa1\x00"} {
		if _, _, err := d.Resolve(ctx, p); !errors.Is(err, ErrNotFound) {
			t.Errorf("%q matched: %v", p, err)
		}
	}
	// ASCII case doesn't matter (ids are lowercase), as with the LIKE
	// this replaced.
	if k, id, err := d.Resolve(ctx, "AA2"); err != nil || k != "env" || id != "aa22" {
		t.Errorf("AA2: %s %s %v", k, id, err)
	}
	if k, id, err := d.Resolve(ctx, "BB11"); err != nil || k != "command" || id != "bb11" {
		t.Errorf("BB11: %s %s %v", k, id, err)
	}
	// Ids after the prefix in order but not starting with it are no
	// match: "ab" sorts after every "aa..." and before "bb11".
	if _, _, err := d.Resolve(ctx, "ab"); !errors.Is(err, ErrNotFound) {
		t.Errorf("ab: %v", err)
	}
	// A prefix of an environment and of a command is ambiguous; a whole
	// command id still wins over environments sharing its prefix.
	if err := commit(t, d, func(b *Batch) {
		b.InsertCommand(&api.Command{ID: "aa1c", Env: "aa11", State: api.CommandRunning, CreatedAt: time.Now()})
	}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Resolve(ctx, "aa1"); !errors.Is(err, api.ErrAmbiguous) || !strings.Contains(err.Error(), "aa11 and aa1c") {
		t.Errorf("aa1: %v", err)
	}
	if k, id, err := d.Resolve(ctx, "aa1c"); err != nil || k != "command" || id != "aa1c" {
		t.Errorf("aa1c: %s %s %v", k, id, err)
	}
}

func TestCommandRoundTrip(t *testing.T) {
	d := open(t)
	ctx := context.Background()
	now := time.Now().UTC().Truncate(time.Microsecond)
	code, sig := 3, 9
	yes := true
	base := uint64(4)
	c := &api.Command{
		ID: "c1", Env: "e1", State: api.CommandExited, CreatedAt: now, Purpose: "p",
		Labels: map[string]string{"a": "1", "b": ""}, Argv: []string{"sh", "-c", "x y"}, Cwd: "/w",
		Output: api.OutputPipe, Dir: "/d", StdoutPath: "/d/stdout", StderrPath: "/d/stderr",
		EnvPolicy: "inherit", EnvKeys: []string{"TOKEN"}, Tier: api.TierCgroup2,
		Launcher: &api.Identity{BootID: "b", PID: 1, StartTime: 2}, CgroupPath: "/cg", CgroupInode: 77,
		Guardian: &api.Identity{BootID: "b", PID: 3, StartTime: 4}, ProofDev: 5, ProofIno: 6,
		Workload: &api.Identity{BootID: "b", PID: 7, StartTime: 8}, StartedAt: &now,
		Timeout: api.Duration(time.Minute), TimeoutMono: 99,
		ExitCode: &code, Signal: &sig, LeaderState: api.PhaseExited, LeaderExitedAt: &now,
		TreeState: api.PhaseExited, TreeExitedAt: &now, TreeEvidence: "receipt", StopReason: api.ReasonIdle,
		StoppedByHostfork: true, OOM: &yes, OOMEvidence: "counter", OOMBaseline: &base,
		Survivors: []api.Identity{{BootID: "b", PID: 9, StartTime: 10}}, OutputTruncated: true, LimitsNote: "n",
		WorkloadKind: "agent", Admission: "ok", Capture: map[string]api.StreamCapture{"stdout": {State: "complete", Bytes: 3}},
		CleanupErrors: []string{"x"}, Error: "e",
	}
	if err := commit(t, d, func(b *Batch) { b.InsertEnv(newEnv("e1")); b.InsertCommand(c) }); err != nil {
		t.Fatal(err)
	}
	got, err := d.Command(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, c) {
		a, _ := json.Marshal(got)
		b, _ := json.Marshal(c)
		t.Fatalf("round trip:\n got %s\nwant %s\n(%v %v)", a, b, *got.OOMBaseline, got.TimeoutMono)
	}
}

func TestLabelSelectors(t *testing.T) {
	d := open(t)
	ctx := context.Background()
	err := commit(t, d, func(b *Batch) {
		b.InsertEnv(newEnv("e1"))
		b.InsertCommand(&api.Command{ID: "c1", Env: "e1", State: api.CommandRunning, CreatedAt: time.Now(), Labels: map[string]string{"team": "ci", "x": "1"}})
		b.InsertCommand(&api.Command{ID: "c2", Env: "e1", State: api.CommandExited, CreatedAt: time.Now(), Labels: map[string]string{"team": "dev"}})
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		sel  api.Selector
		want int
	}{{nil, 2}, {api.Selector{"team=ci"}, 1}, {api.Selector{"team"}, 2}, {api.Selector{"team", "x=1"}, 1}, {api.Selector{"team=qa"}, 0}} {
		got, err := d.Commands(ctx, CommandQuery{Labels: c.sel})
		if err != nil || len(got) != c.want {
			t.Errorf("%v: %d rows, %v", c.sel, len(got), err)
		}
	}
	got, _ := d.Commands(ctx, CommandQuery{States: []api.CommandState{api.CommandRunning}})
	if len(got) != 1 || got[0].Labels["team"] != "ci" {
		t.Fatalf("states: %+v", got)
	}
}

func TestSettleRule(t *testing.T) {
	for _, c := range []struct {
		state  string
		exists bool
		want   string
	}{
		{IntentPending, false, IntentAbandoned},
		{IntentPending, true, IntentCreated},
		{IntentCreated, false, IntentReleased},
		{IntentCreated, true, IntentCreated},
		{IntentReleased, true, IntentReleased},
	} {
		if got := Settle(c.state, Fact{Exists: c.exists}); got != c.want {
			t.Errorf("Settle(%s, %v) = %s, want %s", c.state, c.exists, got, c.want)
		}
	}
}

func TestIntentsAndEvents(t *testing.T) {
	d := open(t)
	ctx := context.Background()
	in := &Intent{EnvID: "e1", Kind: KindDir, Target: "/x"}
	e := newEnv("e1")
	e.State = api.EnvCreating
	if err := commit(t, d, func(b *Batch) { b.InsertEnv(e); b.AddIntent(in) }); err != nil {
		t.Fatal(err)
	}
	if in.ID == 0 {
		t.Fatal("intent id not set")
	}
	act := *e
	act.State = api.EnvActive
	if err := commit(t, d, func(b *Batch) {
		b.UpdateEnv(e, &act)
		b.SettleIntent(in.ID, Fact{Exists: true, Identity: `{"inode":1}`})
	}); err != nil {
		t.Fatal(err)
	}
	ins, _ := d.Intents(ctx, IntentFilter{EnvID: "e1"})
	if len(ins) != 1 || ins[0].State != IntentCreated || ins[0].Identity != `{"inode":1}` {
		t.Fatalf("intents %+v", ins)
	}
	stop := act
	stop.State, stop.StopReason = api.EnvStopped, api.ReasonDeadline
	if err := commit(t, d, func(b *Batch) { b.UpdateEnv(&act, &stop) }); err != nil {
		t.Fatal(err)
	}
	evs, err := d.Events(ctx, 0, 0)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []api.EventKind
	for _, ev := range evs {
		kinds = append(kinds, ev.Kind)
	}
	want := []api.EventKind{api.EventEnvCreated, api.EventEnvStopDecided, api.EventDeadline, api.EventEnvStopped}
	if fmt.Sprint(kinds) != fmt.Sprint(want) {
		t.Fatalf("events %v, want %v", kinds, want)
	}
	for i, ev := range evs {
		if ev.Seq != int64(i+1) {
			t.Fatalf("seq %d at %d", ev.Seq, i)
		}
	}
	rest, _ := d.Events(ctx, 2, 0)
	if len(rest) != 2 || rest[0].Seq != 3 {
		t.Fatalf("since 2: %+v", rest)
	}
}

// Event counts are written with the events, outlive the rows retention
// deletes, and a store made before them has its existing events counted
// once by the migration.
func TestEventCountsOutliveRows(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	d, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { d.Close() }()
	yes := true
	for _, id := range []string{"e1", "e2"} {
		e := newEnv(id)
		c := &api.Command{ID: "c" + id, Env: id, State: api.CommandRunning, CreatedAt: time.Now().UTC()}
		if err := commit(t, d, func(b *Batch) { b.InsertEnv(e); b.InsertCommand(c) }); err != nil {
			t.Fatal(err)
		}
		done := *c
		done.State, done.StopReason, done.OOM = api.CommandExited, api.ReasonLimit, &yes
		stop := *e
		stop.State, stop.StopReason = api.EnvStopped, api.ReasonCompleted
		if err := commit(t, d, func(b *Batch) { b.UpdateCommand(c, &done); b.UpdateEnv(e, &stop) }); err != nil {
			t.Fatal(err)
		}
	}
	counts := func() string {
		t.Helper()
		cs, err := d.EventCounts(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, c := range cs {
			fmt.Fprintf(&b, "%s/%s=%d ", c.Kind, c.Reason, c.Count)
		}
		return b.String()
	}
	want := "command.started/=2 command.stop_decided/limit=2 command.tree_exited/limit=2 env.created/=2 env.stop_decided/completed=2 env.stopped/completed=2 oom/=2 "
	if got := counts(); got != want {
		t.Fatalf("counts %s\nwant   %s", got, want)
	}
	if _, err := d.db.Exec("DROP TABLE event_counts; ALTER TABLE commands DROP COLUMN session; ALTER TABLE commands DROP COLUMN last_input_at; " +
		"ALTER TABLE commands DROP COLUMN last_output_at; PRAGMA user_version = 4"); err != nil {
		t.Fatal(err)
	}
	d.Close()
	if d, err = Open(ctx, dir); err != nil {
		t.Fatal(err)
	}
	if got := counts(); got != want {
		t.Fatalf("migrated from schema 4: %s\nwant %s", got, want)
	}
	// Retention deletes an environment's events with its rows (the event
	// log is bounded by retention, as the soak found it was not), and the
	// counts stay.
	if err := commit(t, d, func(b *Batch) { b.DeleteEnv("e1") }); err != nil {
		t.Fatal(err)
	}
	if got := counts(); got != want {
		t.Fatalf("after retention deleted e1: %s\nwant %s", got, want)
	}
	var left int
	if err := d.db.QueryRow("SELECT count(*) FROM events WHERE env_id = 'e1'").Scan(&left); err != nil || left != 0 {
		t.Fatalf("events of the deleted environment: %d (%v), want 0", left, err)
	}
}

func TestCommandEventDerivation(t *testing.T) {
	now := time.Now()
	code := 0
	yes := true
	res := &api.Command{ID: "c", Env: "e", State: api.CommandReserved}
	run := *res
	run.State, run.LeaderState, run.TreeState = api.CommandRunning, api.PhaseLive, api.PhaseLive
	done := run
	done.State, done.LeaderState, done.TreeState, done.ExitCode = api.CommandExited, api.PhaseExited, api.PhaseExited, &code
	done.StopReason, done.OOM = api.ReasonTimeout, &yes
	for _, c := range []struct {
		name      string
		old, next *api.Command
		want      string
	}{
		{"insert", nil, res, "[]"},
		{"release", res, &run, "[command.started]"},
		{"final", &run, &done, "[command.stop_decided deadline command.leader_exited oom command.tree_exited]"},
		{"again", &done, &done, "[]"},
	} {
		var kinds []api.EventKind
		for _, ev := range commandEvents(c.old, c.next, now) {
			kinds = append(kinds, ev.Kind)
		}
		if got := fmt.Sprint(kinds); got != c.want && !(got == "[]" && c.want == "[]") {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

// Many writers of one process queue for the one write slot; none fails
// with "database is locked".
func TestConcurrentWriters(t *testing.T) {
	d := open(t)
	if err := commit(t, d, func(b *Batch) { b.InsertEnv(newEnv("e")) }); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 50)
	for i := 0; i < 50; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			var b Batch
			b.InsertCommand(&api.Command{ID: fmt.Sprintf("c%02d", i), Env: "e", State: api.CommandRunning, CreatedAt: time.Now()})
			errs <- d.Commit(context.Background(), &b)
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	cs, _ := d.Commands(context.Background(), CommandQuery{Env: "e"})
	if len(cs) != 50 {
		t.Fatalf("%d commands", len(cs))
	}
}

// handles opens n handles on one new registry (each with its own open
// file descriptions, as each process has).
func handles(t *testing.T, n int) []*DB {
	t.Helper()
	dir := t.TempDir()
	var ds []*DB
	for i := 0; i < n; i++ {
		d, err := Open(context.Background(), dir)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		ds = append(ds, d)
	}
	return ds
}

// Writers of every handle (each its own open file description, as each
// process's is) queue on the writers' lock of registry.lock, and a writer
// whose context ends while it waits gives up without keeping the lock.
func TestWritersQueueOnTheLock(t *testing.T) {
	ctx := context.Background()
	ds := handles(t, 2)
	if err := commit(t, ds[0], func(b *Batch) { b.InsertEnv(newEnv("e")) }); err != nil {
		t.Fatal(err)
	}
	insert := func(id string) *Batch {
		var b Batch
		b.InsertCommand(&api.Command{ID: id, Env: "e", State: api.CommandRunning, CreatedAt: time.Now()})
		return &b
	}
	wait := func(done chan error) error {
		select {
		case err := <-done:
			return err
		case <-time.After(30 * time.Second): // a safety bound only
			t.Fatal("a writer still waits after the lock was let go")
			return nil
		}
	}
	unlock, err := ds[0].lockWriters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ds[1].Commit(ctx, insert("c1")) }()
	select {
	case err := <-done:
		t.Fatalf("a commit went through while another handle held the writers' lock (%v)", err)
	case <-time.After(200 * time.Millisecond):
	}
	unlock()
	if err := wait(done); err != nil {
		t.Fatal(err)
	}

	unlock, err = ds[0].lockWriters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if err := ds[1].Commit(short, insert("c2")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a writer whose context ended while it waited: %v", err)
	}
	unlock()
	go func() { done <- ds[1].Commit(ctx, insert("c3")) }()
	if err := wait(done); err != nil {
		t.Fatal(err)
	}
	go func() { done <- ds[0].Commit(ctx, insert("c4")) }()
	if err := wait(done); err != nil {
		t.Fatal(err)
	}
	cs, _ := ds[0].Commands(ctx, CommandQuery{Env: "e"})
	if len(cs) != 3 {
		t.Fatalf("%d commands, want c1, c3 and c4", len(cs))
	}
}

// A waiter that gave up and is granted the lock later holds (and lets
// go of) only its own: the lock a later commit of the same handle took
// stays held.
func TestAbandonedWaiterKeepsToItself(t *testing.T) {
	ctx := context.Background()
	ds := handles(t, 2)
	holder, err := ds[0].lockWriters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	short, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	if _, err := ds[1].lockWriters(short); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("the first waiter: %v, want its deadline", err)
	}
	got := make(chan func(), 1)
	go func() {
		u, err := ds[1].lockWriters(ctx)
		if err != nil {
			t.Error(err)
		}
		got <- u
	}()
	holder()
	var second func()
	select {
	case second = <-got:
	case <-time.After(30 * time.Second): // a safety bound only
		t.Fatal("the second waiter never got the lock")
	}
	time.Sleep(100 * time.Millisecond) // room for the first waiter's grant and release
	fd := ds[0].writers.Fd()
	if err := ofdLock(fd, unix.F_OFD_SETLK, unix.F_WRLCK); err == nil {
		t.Fatal("another handle took the writers' lock while the second waiter held it")
	}
	second()
	// The first waiter may now be granted the lock for a moment (it lets
	// go at once): the lock comes free for everyone soon after.
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(time.Millisecond) {
		err := ofdLock(fd, unix.F_OFD_SETLK, unix.F_WRLCK)
		if err == nil {
			break
		}
		if time.Now().After(end) { // a safety bound only
			t.Fatalf("the lock after both waiters let go: %v", err)
		}
	}
	_ = ofdLock(fd, unix.F_OFD_SETLK, unix.F_UNLCK)
}

// Close waits for a commit in flight (here: one waiting for another
// handle's writers' lock), which lands; a commit after Close fails.
func TestCloseWaitsForACommit(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()
	a, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	b, err := Open(ctx, dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := commit(t, a, func(b *Batch) { b.InsertEnv(newEnv("e")) }); err != nil {
		t.Fatal(err)
	}
	unlock, err := a.lockWriters(ctx)
	if err != nil {
		t.Fatal(err)
	}
	done, closed := make(chan error, 1), make(chan error, 1)
	go func() {
		var bt Batch
		bt.InsertCommand(&api.Command{ID: "c", Env: "e", State: api.CommandRunning, CreatedAt: time.Now()})
		done <- b.Commit(ctx, &bt)
	}()
	for end := time.Now().Add(30 * time.Second); len(b.writing) == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(end) { // a safety bound only
			t.Fatal("the commit never started")
		}
	}
	go func() { closed <- b.Close() }()
	select {
	case <-closed:
		t.Fatal("Close returned while a commit was in flight")
	case <-time.After(100 * time.Millisecond):
	}
	unlock()
	for _, ch := range []chan error{done, closed} {
		select {
		case err := <-ch:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second): // a safety bound only
			t.Fatal("the commit or the Close never ended")
		}
	}
	if _, err := a.Command(ctx, "c"); err != nil {
		t.Fatalf("the commit in flight did not land: %v", err)
	}
	if err := commit(t, b, func(b *Batch) { b.InsertEnv(newEnv("f")) }); err == nil {
		t.Fatal("a commit after Close went through")
	}
}

func TestFilesArePrivate(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := commit(t, d, func(b *Batch) { b.InsertEnv(newEnv("e")) }); err != nil {
		t.Fatal(err)
	}
	d.Close()
	for _, f := range []string{FileName, FileName + "-wal", FileName + "-shm"} {
		st, err := os.Stat(filepath.Join(dir, f))
		if err != nil {
			continue
		}
		if st.Mode().Perm()&0o077 != 0 {
			t.Errorf("%s has mode %v", f, st.Mode().Perm())
		}
	}
	// An existing, too open database is tightened.
	if err := os.Chmod(filepath.Join(dir, FileName), 0o644); err != nil {
		t.Fatal(err)
	}
	d, err = Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	d.Close()
	if st, _ := os.Stat(filepath.Join(dir, FileName)); st.Mode().Perm() != 0o600 {
		t.Fatalf("not tightened: %v", st.Mode().Perm())
	}
}

func TestNewerSchemaRefused(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := d.db.Exec(fmt.Sprintf("PRAGMA user_version = %d", SchemaVersion+1)); err != nil {
		t.Fatal(err)
	}
	d.Close()
	if _, err := Open(context.Background(), dir); !errors.Is(err, ErrNewerSchema) || !errors.Is(err, api.ErrStore) {
		t.Fatalf("newer schema: %v", err)
	}
	// A negative version (a damaged header) is refused too, not a panic.
	raw, _ := sql.Open("sqlite3", filepath.Join(dir, FileName))
	raw.Exec("PRAGMA user_version = -1")
	raw.Close()
	if _, err := Open(context.Background(), dir); !errors.Is(err, api.ErrStore) {
		t.Fatalf("negative version: %v", err)
	}
}

// A store of schema 2 is migrated: its rows keep their meaning, labels
// become queryable, and the old duration fields become durations.
func TestMigrateFromV2(t *testing.T) {
	dir := t.TempDir()
	raw, err := sql.Open("sqlite3", filepath.Join(dir, FileName))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range migrations[:2] {
		if _, err := raw.Exec(m.sql); err != nil {
			t.Fatal(err)
		}
	}
	env := `{"id":"e1","state":"stopped","created_at":"2026-11-01T10:00:00Z","boot_id":"b","labels":{"team":"ci"},"tier":"cgroup2","run_dir":"/r/runs/e1","owner_exit":"stop","until_stopped":false,"ttl_ns":600000000000,"grace_ns":2000000000,"deadline_mono_ns":5,"stop_reason":"user","trees":[{"name":"p","kind":"overlay","source":"/s","host_path":"/h","workload_path":"/w","state":"allocated"}]}`
	cmd := `{"id":"c1","env":"e1","record_state":"exited","created_at":"2026-11-01T10:00:01Z","labels":{"team":"ci"},"argv":["true"],"output":"pipe","dir":"/r/runs/e1/commands/c1","tier":"cgroup2","guardian":{"boot_id":"b","pid":10,"start_time":11},"exit_code":0,"signal":null,"leader_state":"exited","tree_state":"exited","oom":null,"capture":{"stdout":{"state":"complete","bytes":1}}}`
	if _, err := raw.Exec("INSERT INTO envs (id, rev, state, created_at, data) VALUES ('e1', 3, 'stopped', 1, ?)", env); err != nil {
		t.Fatal(err)
	}
	if _, err := raw.Exec("INSERT INTO commands (id, env_id, rev, state, created_at, data) VALUES ('c1', 'e1', 4, 'exited', 2, ?)", cmd); err != nil {
		t.Fatal(err)
	}
	raw.Exec("PRAGMA user_version = 2")
	raw.Close()
	d, err := Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	e, err := d.Env(ctx, "e1")
	if err != nil {
		t.Fatal(err)
	}
	if e.Rev != 3 || e.TTL.D() != 10*time.Minute || e.Grace.D() != 2*time.Second || e.DeadlineMono != 5 || e.Labels["team"] != "ci" || len(e.Trees) != 1 || e.StopReason != api.ReasonUser {
		t.Fatalf("env %+v", e)
	}
	c, err := d.Command(ctx, "c1")
	if err != nil {
		t.Fatal(err)
	}
	if c.Rev != 4 || c.Guardian == nil || c.Guardian.PID != 10 || c.ExitCode == nil || c.Capture["stdout"].Bytes != 1 || c.Labels["team"] != "ci" {
		t.Fatalf("command %+v", c)
	}
	if cs, _ := d.Commands(ctx, CommandQuery{Labels: api.Selector{"team=ci"}}); len(cs) != 1 {
		t.Fatalf("label query after migration: %d", len(cs))
	}
}

// A store of schema 3 gets the index on a command's environment and state
// in place of the one on its environment (schema 4), and the query for an
// environment's live commands uses it.
func TestMigrateFromV3(t *testing.T) {
	dir := t.TempDir()
	d, err := Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	// Back to schema 3's indexes.
	if _, err := d.db.Exec("DROP INDEX commands_env_state; CREATE INDEX commands_env ON commands(env_id); DROP TABLE event_counts; " +
		"ALTER TABLE commands DROP COLUMN session; ALTER TABLE commands DROP COLUMN last_input_at; ALTER TABLE commands DROP COLUMN last_output_at; PRAGMA user_version = 3"); err != nil {
		t.Fatal(err)
	}
	d.Close()
	d, err = Open(context.Background(), dir)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	ctx := context.Background()
	if v, err := d.Version(ctx); err != nil || v != SchemaVersion || v < 4 {
		t.Fatalf("version %d, %v", v, err)
	}
	var names []string
	rows, err := d.db.Query("SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'commands' ORDER BY name")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var n string
		rows.Scan(&n)
		names = append(names, n)
	}
	rows.Close()
	if got := strings.Join(names, " "); !strings.Contains(got, "commands_env_state") || strings.Contains(got+" ", "commands_env ") {
		t.Fatalf("indexes on commands: %s", got)
	}
	var plan strings.Builder
	prow, err := d.db.Query("EXPLAIN QUERY PLAN "+commandSelect+" WHERE 1=1 AND env_id IN (?) AND state IN (?, ?, ?) ORDER BY created_at, id", "e", "reserved", "running", "unverified")
	if err != nil {
		t.Fatal(err)
	}
	for prow.Next() {
		var id, parent, notused int
		var detail string
		prow.Scan(&id, &parent, &notused, &detail)
		plan.WriteString(detail + "; ")
	}
	prow.Close()
	if !strings.Contains(plan.String(), "commands_env_state (env_id=? AND state=?)") {
		t.Fatalf("live commands of an environment: plan %q", plan.String())
	}
}

func TestDurationsInEvidence(t *testing.T) {
	in := json.RawMessage(`{"memory":{"source":"cgroup1"},"cpu":{"usage_source":"x","usage_ns":1500000000,"throttled_ns":20000000,"periods":3}}`)
	var got map[string]map[string]any
	if err := json.Unmarshal(durationsInEvidence(in), &got); err != nil {
		t.Fatal(err)
	}
	cpu := got["cpu"]
	if cpu["usage"] != "1.5s" || cpu["throttled_time"] != "20ms" || cpu["periods"] != 3.0 || cpu["usage_ns"] != nil || cpu["throttled_ns"] != nil {
		t.Fatalf("cpu: %v", cpu)
	}
	if got["memory"]["source"] != "cgroup1" {
		t.Fatalf("memory: %v", got["memory"])
	}
	if out := durationsInEvidence(json.RawMessage(`not json`)); string(out) != "not json" {
		t.Fatalf("unreadable evidence changed: %s", out)
	}
}

// TestEarlierEncodingsRead: an environment's data document and a command's
// argv column read back the same whichever build wrote them. Builds with
// the hand-written codec (decision 63, retired) wrote strings without HTML
// escaping; encoding/json escapes '<', '>' and '&'. Both escape U+2028.
func TestEarlierEncodingsRead(t *testing.T) {
	d := open(t)
	ctx := context.Background()
	now := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	if err := commit(t, d, func(b *Batch) {
		b.InsertEnv(newEnv("e1"))
		b.InsertCommand(&api.Command{ID: "c1", Env: "e1", State: api.CommandExited, CreatedAt: now, Argv: []string{"true"}})
	}); err != nil {
		t.Fatal(err)
	}
	const doc = `{"id":"","rev":0,"state":"","created_at":"2026-12-06T10:00:00Z","boot_id":"b","purpose":"a<b>&c \u2028",` +
		`"labels":{"team":"<ci>"},"tier":"cgroup2","cgroup_inode":7,"run_dir":"/r/runs/e1","owner_exit":"stop",` +
		`"owner":{"boot_id":"b","pid":41,"start_time":42},"until_stopped":false,"auto_stop":true,"ttl":"10m0s","grace":"2s",` +
		`"idle_timeout":"0s","activated_at":"2026-12-06T10:00:01.5Z","deadline_at":null,"spec":{"purpose":"a<b>&c"},` +
		`"trees":[{"name":"w","kind":"overlay","source":"/s&t","host_path":"/h","workload_path":"/w","state":"allocated"}],` +
		`"keeper":null,"stop_reason":"","stop_requested_at":null,"stopped_at":null,"cleanup_errors":[],"error":"",` +
		`"owner_alive":"","expired":false,"due":"","commands":null}`
	escaped := strings.NewReplacer("<", `\u003c`, ">", `\u003e`, "&", `\u0026`)
	wantArgv := []string{"sh", "-c", "a && b <c> \u2028"}
	for _, form := range []struct{ name, data, argv string }{
		{"hand-written codec", doc, `["sh","-c","a && b <c> \u2028"]`},
		{"encoding/json", escaped.Replace(doc), escaped.Replace(`["sh","-c","a && b <c> \u2028"]`)},
	} {
		if _, err := d.db.Exec("UPDATE envs SET data = ? WHERE id = 'e1'", form.data); err != nil {
			t.Fatal(err)
		}
		if _, err := d.db.Exec("UPDATE commands SET argv = ? WHERE id = 'c1'", form.argv); err != nil {
			t.Fatal(err)
		}
		e, err := d.Env(ctx, "e1")
		if err != nil {
			t.Fatalf("%s: %v", form.name, err)
		}
		if e.Purpose != "a<b>&c \u2028" || e.CgroupInode != 7 || e.Owner == nil || *e.Owner != (api.Identity{BootID: "b", PID: 41, StartTime: 42}) ||
			e.TTL.D() != 10*time.Minute || e.Grace.D() != 2*time.Second || e.ActivatedAt == nil || !e.ActivatedAt.Equal(now.Add(1500*time.Millisecond)) ||
			e.DeadlineAt != nil || len(e.Trees) != 1 || e.Trees[0].Source != "/s&t" || !e.AutoStop {
			t.Fatalf("%s: env %+v", form.name, e)
		}
		var spec struct{ Purpose string }
		if err := json.Unmarshal(e.Spec, &spec); err != nil || spec.Purpose != "a<b>&c" {
			t.Fatalf("%s: spec %s (%v)", form.name, e.Spec, err)
		}
		c, err := d.Command(ctx, "c1")
		if err != nil {
			t.Fatalf("%s: %v", form.name, err)
		}
		if !reflect.DeepEqual(c.Argv, wantArgv) {
			t.Fatalf("%s: argv %q, want %q", form.name, c.Argv, wantArgv)
		}
		cs, err := d.Commands(ctx, CommandQuery{Brief: true})
		if err != nil || len(cs) != 1 || !reflect.DeepEqual(cs[0].Argv, wantArgv) {
			t.Fatalf("%s: brief listing %+v (%v)", form.name, cs, err)
		}
	}
}
