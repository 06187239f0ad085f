package tree

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/habemus-papadum/hostfork/api"
	"github.com/habemus-papadum/hostfork/internal/cgroup"
	"github.com/habemus-papadum/hostfork/internal/linux"
)

// SampleTarget names one workload tree to sample: a cgroup directory (its
// memory counter; without one, the processes in it and its descendant
// groups), or else the roots of a PID tree (the roots and all their live
// descendants, found as Stop finds them).
type SampleTarget struct {
	Cgroup string
	PIDs   []int
}

// Sampler samples workload trees' memory twice, at least Gap apart, for
// admission (internal/admit decides from the samples), and calls a tree
// stable when the readings differ by at most max(Slack, Tolerance × the
// larger). The zero value uses 2 ms, 5 % and 1 MiB. A cgroup's counter
// (memory.current, memory.usage_in_bytes) includes the group's page cache;
// a PID tree's sum does not.
type Sampler struct {
	Gap       time.Duration
	Tolerance float64
	Slack     uint64
	// PSS sums Pss from /proc/PID/smaps_rollup instead of the resident
	// set from /proc/PID/statm. Pss shares each shared page among the
	// processes mapping it, where the resident set counts it in every one
	// (overstating a tree of many processes — the conservative side); but
	// smaps_rollup walks every mapping, which costs far more than statm's
	// O(1) counters and grows with the process's size.
	PSS bool
}

// reading is one pass over one target.
type reading struct {
	bytes    uint64
	members  []int
	source   string
	complete bool
	note     string
}

// Sample samples every target and returns one sample per target, in order.
// Only ctx ending is an error; an unreadable tree is an incomplete sample.
func (s Sampler) Sample(ctx context.Context, targets []SampleTarget) ([]api.Sample, error) {
	gap, tol, slack := cmp.Or(s.Gap, 2*time.Millisecond), cmp.Or(s.Tolerance, 0.05), cmp.Or(s.Slack, 1<<20)
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("sampling workload memory: %w", err)
	}
	buf := make([]byte, 4096)
	// Each target's second reading comes at least gap after its first;
	// the time the first pass takes counts towards the gap.
	first := make([]reading, len(targets))
	at := make([]time.Time, len(targets))
	for i, t := range targets {
		at[i] = time.Now()
		first[i] = s.read(t, nil, buf)
	}
	out := make([]api.Sample, len(targets))
	for i, t := range targets {
		if wait := gap - time.Since(at[i]); wait > 0 {
			timer := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				timer.Stop()
				return nil, fmt.Errorf("sampling workload memory: %w", ctx.Err())
			case <-timer.C:
			}
		}
		// The second pass rereads the members found by the first: a member
		// that exited in between makes the sample incomplete.
		b := s.read(t, first[i].members, buf)
		a := first[i]
		o := api.Sample{Bytes: max(a.bytes, b.bytes), Members: len(b.members), Source: b.source}
		o.Complete = a.complete && b.complete
		diff := max(a.bytes, b.bytes) - min(a.bytes, b.bytes)
		o.Stable = o.Complete && float64(diff) <= max(float64(slack), tol*float64(o.Bytes))
		switch {
		case a.note != "":
			o.Note = a.note
		case b.note != "":
			o.Note = b.note
		case !o.Stable:
			o.Note = fmt.Sprintf("readings of %d and %d bytes at least %v apart", a.bytes, b.bytes, gap)
		}
		out[i] = o
	}
	return out, nil
}

// read takes one reading of t; members, when given, fixes the PID set.
func (s Sampler) read(t SampleTarget, members []int, buf []byte) reading {
	if t.Cgroup != "" && members == nil {
		for _, f := range []string{"memory.current", "memory.usage_in_bytes"} {
			b, err := readSmall(filepath.Join(t.Cgroup, f), buf)
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			if err != nil {
				return reading{source: f, note: err.Error()}
			}
			n, err := strconv.ParseUint(string(bytes.TrimSpace(b)), 10, 64)
			if err != nil {
				return reading{source: f, note: fmt.Sprintf("parsing %s: %v", f, err)}
			}
			return reading{bytes: n, source: f, complete: true}
		}
	}
	r := reading{complete: true, members: members}
	if r.members == nil {
		var err error
		if t.Cgroup != "" {
			r.members, err = cgroup.Open(t.Cgroup).AllProcs()
			if err != nil {
				err = fmt.Errorf("listing members of cgroup %s: %w", t.Cgroup, err)
			}
		} else {
			r.members, err = withDescendants(t.PIDs)
		}
		if err != nil {
			return reading{note: err.Error()}
		}
		if len(r.members) == 0 {
			// Nothing to read is not a complete observation of a tree.
			return reading{note: "no live members"}
		}
	}
	for _, pid := range r.members {
		n, src, err := s.procMemory(pid, buf)
		if err != nil {
			r.complete = false
			r.note = err.Error()
			continue
		}
		r.bytes += n
		if r.source == "" || r.source == src {
			r.source = src
		} else {
			r.source = "pss+rss"
		}
	}
	return r
}

// withDescendants returns roots (once each, in order) and then their live
// descendants. A root that is not a live process is an error: the tree
// can't be observed.
func withDescendants(roots []int) ([]int, error) {
	if len(roots) == 0 {
		return nil, errors.New("no root PIDs given")
	}
	out := make([]int, 0, len(roots))
	for _, r := range roots {
		if r <= 0 || unix.Kill(r, 0) == unix.ESRCH {
			return nil, fmt.Errorf("root pid %d is not running", r)
		}
		if !slices.Contains(out, r) {
			out = append(out, r)
		}
	}
	return append(out, descendantsOf(out)...), nil
}

// procMemory reads one process's memory: the resident set from statm, or
// with PSS, Pss from smaps_rollup (falling back to statm when that is not
// readable, e.g. another user's process). A process without a mm (a
// zombie) reads as 0.
func (s Sampler) procMemory(pid int, buf []byte) (uint64, string, error) {
	p := "/proc/" + strconv.Itoa(pid)
	if s.PSS {
		if b, err := readSmall(p+"/smaps_rollup", buf); err == nil {
			n, ok := kBField(b, "Pss:")
			if ok || len(b) == 0 {
				return n, "pss", nil
			}
		}
	}
	b, err := readSmall(p+"/statm", buf)
	if err != nil {
		return 0, "rss", fmt.Errorf("reading memory of pid %d: %w", pid, err)
	}
	f := bytes.Fields(b) // size resident shared text lib data dt, in pages
	if len(f) < 2 {
		return 0, "rss", fmt.Errorf("reading memory of pid %d: malformed statm %q", pid, b)
	}
	n, err := strconv.ParseUint(string(f[1]), 10, 64)
	if err != nil {
		return 0, "rss", fmt.Errorf("reading memory of pid %d: %w", pid, err)
	}
	return n * uint64(os.Getpagesize()), "rss", nil
}

// kBField finds "<name> N kB" in a /proc file and returns N in bytes.
func kBField(b []byte, name string) (uint64, bool) {
	i := bytes.Index(b, []byte(name))
	if i < 0 || (i > 0 && b[i-1] != '\n') {
		return 0, false
	}
	rest := b[i+len(name):]
	if j := bytes.IndexByte(rest, '\n'); j >= 0 {
		rest = rest[:j]
	}
	f := bytes.Fields(rest)
	if len(f) == 0 {
		return 0, false
	}
	n, err := strconv.ParseUint(string(f[0]), 10, 64)
	if err != nil {
		return 0, false
	}
	return n * 1024, true
}

// readSmall reads a small kernel file (/proc/PID/statm, smaps_rollup, a
// cgroup counter) whole into buf, in three system calls (os.ReadFile
// takes six): sampling a hundred trees stays cheap.
func readSmall(path string, buf []byte) ([]byte, error) {
	n, err := linux.ReadSmall(path, buf)
	if err != nil {
		return nil, err
	}
	return buf[:n], nil
}
