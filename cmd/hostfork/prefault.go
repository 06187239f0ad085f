package main

// The hostfork CLI maps its code and read-only data in one call when it
// starts, instead of one page fault at a time (docs/decisions.md, entry
// 66). A CLI call is a short process that runs a fresh copy of the Go
// runtime, the package initialisers, SQLite's parser and the engine: it
// touches a few hundred pages of the binary once each, and in a virtual
// machine every fault is a trip through the hypervisor's page tables.
// MADV_POPULATE_READ (Linux 5.14) maps a whole range from the page cache
// in one system call; older kernels refuse it (EINVAL) and nothing
// changes.
//
// Only pages already in the page cache are worth mapping ahead: on a cold
// cache the call would read the whole binary from disk, where demand
// paging reads only what runs (and the device's readahead around each
// fault: on a disk that reads megabytes ahead, most of the binary is in
// the page cache after the loader's first faults, and then it is
// populated too). So a segment is populated only when mincore says nearly
// all of it is resident (the common case: the binary ran a moment ago).
//
// And only where a page fault is dear (entry 69). Populating maps every
// page of the segments (about 3,000), where a call touches a few hundred,
// 16 to a fault: on a VM where a fault costs 12.7 µs that saved 2.5 ms of
// 'hostfork version'; on one where it costs 1.2 µs it adds 0.9 ms. So the
// constructor first times three page faults of its own and populates
// only when one takes at least HF_DEAR_FAULT_NS. HOSTFORK_PREFAULT=1
// (always) or 0 (never) in the environment overrides the timing; the
// page-cache rule holds either way.
//
// The same constructor raises the process's timer slack (entry 72,
// hf_raise_timerslack below) and narrows the main thread's CPU affinity
// to one CPU until the package initialisers are done, so that the Go
// runtime starts with one P (entry 74, hf_narrow_affinity below).
//
// It is a constructor of this binary alone, not of the library: a program
// that imports hostfork decides for itself how it maps its binary. It
// does nothing in the helper modes (the guardian and the keeper, argv[1]
// "__hostfork_…"), which run a few pages of C and must stay small.

/*
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <link.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <time.h>
#include <unistd.h>

#ifndef MADV_POPULATE_READ
#define MADV_POPULATE_READ 22
#endif

// hf_resident_share is the share, in percent, of [a, a+len) that is in
// the page cache (0 when mincore fails).
static int hf_resident_share(uintptr_t a, size_t len, long pg)
{
	unsigned char vec[4096];
	size_t pages = (len + (size_t)pg - 1) / (size_t)pg, in = 0;
	for (size_t done = 0; done < pages;) {
		size_t n = pages - done < sizeof vec ? pages - done : sizeof vec;
		if (mincore((void *)(a + done * (size_t)pg), n * (size_t)pg, vec) < 0)
			return 0;
		for (size_t i = 0; i < n; i++)
			in += vec[i] & 1;
		done += n;
	}
	return pages ? (int)(in * 100 / pages) : 0;
}

// What the constructor found and did, for TestPrefault: the smallest
// resident share of a read-only segment (-1: none looked at), how many
// segments it looked at and how many it populated, and what a page fault
// cost (ns; 0: not timed).
static int hf_prefault_share = -1, hf_prefault_seen = 0, hf_prefault_done = 0;
static long hf_prefault_fault_ns = 0;

// HF_DEAR_FAULT_NS: from this cost of a page fault on, populating the
// binary pays (entry 69: a loss of 0.9 ms at 1.2 µs a fault, a gain of
// 2.5 ms at 12.7 µs; even at about 4 µs).
#define HF_DEAR_FAULT_NS 4000L

// hf_fault_ns times a page fault here: the smallest of three first
// touches of fresh anonymous pages (the mapping's first page is touched
// untimed: it may allocate a page table). Huge pages are turned off for
// the mapping, or one fault could map all four pages. 0 when it can't
// tell.
static long hf_fault_ns(long pg)
{
	char *p = mmap(NULL, 4 * (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	if (p == MAP_FAILED)
		return 0;
	madvise(p, 4 * (size_t)pg, MADV_NOHUGEPAGE);
	((volatile char *)p)[0] = 1;
	long best = 0;
	for (int i = 1; i < 4; i++) {
		struct timespec a, b;
		if (clock_gettime(CLOCK_MONOTONIC, &a) < 0)
			break;
		((volatile char *)p)[i * pg] = 1;
		if (clock_gettime(CLOCK_MONOTONIC, &b) < 0)
			break;
		long d = (b.tv_sec - a.tv_sec) * 1000000000L + (b.tv_nsec - a.tv_nsec);
		if (d > 0 && (best == 0 || d < best))
			best = d;
	}
	munmap(p, 4 * (size_t)pg);
	return best;
}

static int hf_prefault_segments(struct dl_phdr_info *info, size_t size, void *data)
{
	(void)size;
	(void)data;
	if (info->dlpi_name && info->dlpi_name[0])
		return 0; // a shared library: the executable comes first
	long pg = sysconf(_SC_PAGESIZE);
	if (pg <= 0)
		return 1;
	const char *force = getenv("HOSTFORK_PREFAULT");
	if (force && strcmp(force, "0") == 0)
		return 1;
	if (!force || strcmp(force, "1") != 0) {
		hf_prefault_fault_ns = hf_fault_ns(pg);
		if (hf_prefault_fault_ns < HF_DEAR_FAULT_NS)
			return 1; // cheap faults (or untimed): demand paging
	}
	for (int i = 0; i < info->dlpi_phnum; i++) {
		const ElfW(Phdr) *ph = &info->dlpi_phdr[i];
		if (ph->p_type != PT_LOAD || (ph->p_flags & PF_W) || ph->p_memsz == 0)
			continue;
		uintptr_t a = (uintptr_t)(info->dlpi_addr + ph->p_vaddr) & ~(uintptr_t)(pg - 1);
		uintptr_t e = (uintptr_t)(info->dlpi_addr + ph->p_vaddr + ph->p_memsz);
		int share = hf_resident_share(a, e - a, pg);
		if (hf_prefault_share < 0 || share < hf_prefault_share)
			hf_prefault_share = share;
		hf_prefault_seen++;
		if (share >= 90 && madvise((void *)a, e - a, MADV_POPULATE_READ) == 0)
			hf_prefault_done++;
	}
	return 1;
}

// HF_CLI_TIMERSLACK_NS is the timer slack of the CLI's threads (entry
// 72). The Go runtime's sysmon thread sleeps 20 µs at a time while any
// system or cgo call of the one P lasts longer than that, which a CLI
// call's fsyncs, SQLite calls, clones and mkdirs all do: 40-100 wake-ups
// a run, 0.5-1.3 ms of CPU in a VM, where each arms a timer and switches
// context through the hypervisor. The slack lets the kernel end such a
// sleep up to 0.5 ms late. It also delays by as much the moment sysmon
// hands the P of a long call to a goroutine that became runnable: at 1
// ms that cost more wall time than the fewer wake-ups saved; at 0.5 ms
// a run takes 8 % less CPU and 2 % less time. Every thread the runtime
// makes inherits it from this one; event-driven waits (pidfds, pipes,
// inotify) are not delayed, timed ones by at most the slack. Children
// inherit it too, so the helpers are given the original back
// (internal/linux.SetCallerTimerSlack): the guardian and the workload
// it starts run with the slack the caller had. A slack already at least
// as large, or 0 (a real-time thread), is left alone;
// HOSTFORK_CLI_TIMERSLACK_NS=N raises it to N instead (0: leave it). The
// package's own test binary (argv[1] "-test.…") keeps its slack, so that
// the CLI processes its tests start find a caller's slack, as from a
// shell.
#define HF_CLI_TIMERSLACK_NS 500000UL

static unsigned long hf_slack_orig; // the slack before the raise
static int hf_slack_raised;

static void hf_raise_timerslack(void)
{
	unsigned long want = HF_CLI_TIMERSLACK_NS;
	const char *e = getenv("HOSTFORK_CLI_TIMERSLACK_NS");
	if (e && e[0]) {
		// A plain decimal number of at most 100 ms; anything else keeps
		// the default, and says so.
		char *end = NULL;
		errno = 0;
		unsigned long v = *e >= '0' && *e <= '9' ? strtoul(e, &end, 10) : 0;
		if (end && errno == 0 && *end == '\0' && v <= 100000000UL)
			want = v;
		else
			dprintf(2, "hostfork: warning: HOSTFORK_CLI_TIMERSLACK_NS=%.40s ignored: give nanoseconds, 0 to 100000000 (0 leaves the timer slack as it is)\n", e);
	}
	int cur = prctl(PR_GET_TIMERSLACK, 0, 0, 0, 0);
	if (want == 0 || cur <= 0 || (unsigned long)cur >= want)
		return;
	if (prctl(PR_SET_TIMERSLACK, want, 0, 0, 0) == 0) {
		hf_slack_orig = (unsigned long)cur;
		hf_slack_raised = 1;
	}
}

// hf_timerslack reports the slack before the raise, and whether the
// constructor raised it.
static int hf_timerslack(unsigned long *orig)
{
	*orig = hf_slack_orig;
	return hf_slack_raised;
}

// hf_prefaulted reports the record above: the smallest share, the cost
// of a fault, and 1 if every segment looked at was populated.
static int hf_prefaulted(int *share, long *fault_ns)
{
	*share = hf_prefault_share;
	*fault_ns = hf_prefault_fault_ns;
	return hf_prefault_seen > 0 && hf_prefault_done == hf_prefault_seen;
}

// The Go runtime sizes GOMAXPROCS from the CPUs its main thread may run
// on (sched_getaffinity) before any Go code runs; the CLI wants one P
// (entries 54 and 65), and package oneproc's runtime.GOMAXPROCS(1), the
// earliest Go can ask, stops the world to take the second P back. That
// waits for the thread the runtime is starting for it: 0.19 ms median,
// 0.28 ms mean, 0.53 ms at p90 of 'hostfork version' (GODEBUG=inittrace=1,
// 100 calls), and the thread itself is made for nothing. So the
// constructor narrows the main thread's affinity to the CPU it runs on:
// the runtime counts one CPU and starts with one P, and oneproc's call
// changes nothing. The package initialisers then run on that CPU (about
// 1 ms); package main's initialiser (below) widens every thread that
// still has the narrowed mask before anything is started, so the threads
// the runtime makes later, the helpers and the commands inherit the wide
// one (entry 74).
//
// It narrows only a caller that may run on every online CPU, and widens
// to every CPU (all of cpu_set_t), not to the mask it saw. Since Linux
// 6.2 a mask set with sched_setaffinity is kept as the task's requested
// mask and inherited: each cpuset change gives the task the cpuset's
// CPUs within it. A request of every CPU gives exactly the cpuset's, as
// for a task that never set one; a request of the caller's CPUs of the
// moment would keep hostfork's commands off CPUs a cpuset adds later. A
// caller confined to fewer CPUs (a cpuset, taskset) is left alone: its
// request, if it made one, can't be read back. So are GOMAXPROCS set
// (not empty: the runtime takes it as it is), one CPU, a /proc without
// task directories, and a mask larger than cpu_set_t. runtime.NumCPU
// keeps the count it started with (one): the CLI counts CPUs through
// linux.AllowedCPUs.
static int hf_aff_cpu = -1; // the CPU of the narrowed mask, -1 if not narrowed
static int hf_aff_narrowed; // 1 from the narrowing to the restore

// hf_is_narrowed reports whether m is the narrowed mask.
static int hf_is_narrowed(const cpu_set_t *m)
{
	return CPU_COUNT(m) == 1 && CPU_ISSET(hf_aff_cpu, m);
}

static void hf_narrow_affinity(void)
{
	const char *g = getenv("GOMAXPROCS");
	if (g && g[0])
		return; // the runtime takes the user's choice as it is
	cpu_set_t cur;
	CPU_ZERO(&cur);
	if (sched_getaffinity(0, sizeof cur, &cur) != 0 || CPU_COUNT(&cur) < 2)
		return;
	if (CPU_COUNT(&cur) != sysconf(_SC_NPROCESSORS_ONLN))
		return; // confined to fewer CPUs than are online
	if (access("/proc/self/task", R_OK | X_OK) != 0)
		return; // the restore could not find the threads
	int cpu = sched_getcpu();
	if (cpu < 0 || cpu >= CPU_SETSIZE || !CPU_ISSET(cpu, &cur))
		return;
	cpu_set_t one;
	CPU_ZERO(&one);
	CPU_SET(cpu, &one);
	if (sched_setaffinity(0, sizeof one, &one) != 0)
		return;
	hf_aff_cpu = cpu;
	hf_aff_narrowed = 1;
}

// hf_restore_affinity widens every thread of the process that has the
// narrowed mask to every CPU, until two passes over /proc/self/task in a
// row find none (a thread made during a pass inherited its maker's mask,
// which a later pass sees; the spawned helpers widen themselves if one
// slipped through, hf_ctor). Threads with another mask are left as they
// are. 0 when done or nothing was narrowed, -1 when some thread kept the
// narrowed mask.
static int hf_restore_affinity(void)
{
	if (!hf_aff_narrowed)
		return 0;
	cpu_set_t all;
	memset(&all, 0xff, sizeof all);
	for (int pass = 0, quiet = 0; pass < 16; pass++) {
		DIR *d = opendir("/proc/self/task");
		if (!d)
			return -1;
		int changed = 0, failed = 0;
		struct dirent *e;
		while ((e = readdir(d)) != NULL) {
			if (e->d_name[0] < '0' || e->d_name[0] > '9')
				continue;
			pid_t tid = (pid_t)strtol(e->d_name, NULL, 10);
			cpu_set_t m;
			CPU_ZERO(&m);
			if (sched_getaffinity(tid, sizeof m, &m) != 0 || !hf_is_narrowed(&m))
				continue; // ended meanwhile, or not narrowed
			if (sched_setaffinity(tid, sizeof all, &all) == 0)
				changed = 1;
			else if (errno != ESRCH) // ESRCH: the thread ended meanwhile
				failed = 1;
		}
		closedir(d);
		if (failed)
			return -1;
		if (changed) {
			quiet = 0;
		} else if (++quiet == 2) {
			hf_aff_narrowed = 0;
			return 0;
		} else {
			sched_yield();
		}
	}
	return -1;
}

// hf_affinity_cpu is the CPU the constructor narrowed the affinity to,
// -1 if it did not.
static int hf_affinity_cpu(void)
{
	return hf_aff_cpu;
}

// hf_affinity_narrowed reports whether the constructor narrowed the
// affinity, and whether it is still narrowed.
static int hf_affinity_narrowed(int *still)
{
	*still = hf_aff_narrowed;
	return hf_aff_cpu >= 0;
}

__attribute__((constructor)) static void hf_cli_start(int argc, char **argv)
{
	if (argc >= 2 && argv && argv[1] && argv[1][0] == '_' && argv[1][1] == '_')
		return; // a helper mode (internal/supervise dispatches it)
	dl_iterate_phdr(hf_prefault_segments, NULL);
	if (!(argc >= 2 && argv && argv[1] && !strncmp(argv[1], "-test.", 6))) {
		hf_raise_timerslack();
		hf_narrow_affinity();
	}
}
*/
import "C"

import (
	"fmt"
	"os"
	"time"

	"github.com/habemus-papadum/hostfork/internal/linux"
)

// The constructor's narrowed affinity is given back before main and
// before anything starts a process (entry 74): package main's
// initialisers run after every imported package's.
func init() {
	if cpu := int(C.hf_affinity_cpu()); cpu >= 0 {
		// The helpers this process spawns widen themselves if they start
		// with the narrowed mask (a thread made while the restore ran).
		linux.SetStartCPU(cpu)
	}
	if C.hf_restore_affinity() != 0 {
		fmt.Fprintln(os.Stderr, "hostfork: warning: could not give every thread its CPU affinity back after the start; what this call starts may run on one CPU (set GOMAXPROCS=1 in the environment to avoid the narrowing)")
	}
}

// affinityNarrowed reports whether the constructor narrowed this
// process's CPU affinity at its start, and whether it still is.
func affinityNarrowed() (narrowed, still bool) {
	var s C.int
	narrowed = C.hf_affinity_narrowed(&s) != 0
	return narrowed, s != 0
}

// prefaulted reports what the constructor found when this process
// started: the smallest share, in percent, of a read-only segment of the
// executable that was in the page cache (-1: it did not look: a helper
// mode, cheap page faults, or HOSTFORK_PREFAULT=0), what a page fault
// cost (0: not timed), and whether it populated every such segment.
func prefaulted() (share int, fault time.Duration, all bool) {
	var s C.int
	var ns C.long
	all = C.hf_prefaulted(&s, &ns) != 0
	return int(s), time.Duration(ns), all
}

// startTimerSlack is the timer slack this process started with, and
// whether its constructor raised it (entry 72).
func startTimerSlack() (orig uint64, raised bool) {
	var ns C.ulong
	raised = C.hf_timerslack(&ns) != 0
	return uint64(ns), raised
}
