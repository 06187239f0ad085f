package registry

/*
#include <stdlib.h>
#include <string.h>

// SQLite's allocator interface (sqlite3.h: sqlite3_mem_methods), declared
// here because the bundled sqlite3.h is not on this package's include path.
typedef struct hf_mem_methods {
	void *(*xMalloc)(int);
	void (*xFree)(void *);
	void *(*xRealloc)(void *, int);
	int (*xSize)(void *);
	int (*xRoundup)(int);
	int (*xInit)(void *);
	void (*xShutdown)(void *);
	void *pAppData;
} hf_mem_methods;

extern int sqlite3_config(int, ...);
extern int sqlite3_compileoption_used(const char *);
extern int sqlite3_status64(int, long long *, long long *, int);

// HF_ARENA_BYTES is the arena's size. It is part of the binary's zeroed
// data: address space only, each page made when SQLite first touches it.
// memsys5 keeps one control byte per 64-byte block at the arena's end and
// hands out power-of-two blocks, so its largest block is 4 MiB
// (hf_largest); larger allocations always spill.
#define HF_ARENA_BYTES (8 << 20)
#define HF_ATOM 64
static char hf_arena[HF_ARENA_BYTES] __attribute__((aligned(64)));
static hf_mem_methods hf_buddy;  // memsys5's methods, which serve the arena
static int hf_largest;           // memsys5's largest block, in bytes
static long hf_spills;           // allocations the arena could not hold
static long hf_moves;            // of those, resizes that moved out of it

// An allocation outside the arena carries its size in a 16-byte header
// (16 keeps malloc's alignment).
#define HF_HDR 16

static int hf_in_arena(void *p)
{
	return (char *)p >= hf_arena && (char *)p < hf_arena + sizeof hf_arena;
}

static void *hf_spill(int n)
{
	long long *h = malloc((size_t)n + HF_HDR);
	if (!h)
		return 0;
	h[0] = n;
	__atomic_add_fetch(&hf_spills, 1, __ATOMIC_RELAXED);
	return (char *)h + HF_HDR;
}

// Sizes past the largest block go to malloc without asking memsys5, which
// would log each refusal as SQLITE_NOMEM to a log callback (none is set).
// One the arena is too full or fragmented for is still asked for first.
static void *hf_mem_malloc(int n)
{
	void *p = n <= hf_largest ? hf_buddy.xMalloc(n) : 0;
	return p ? p : hf_spill(n);
}

static void hf_mem_free(void *p)
{
	if (hf_in_arena(p))
		hf_buddy.xFree(p);
	else
		free((char *)p - HF_HDR);
}

static int hf_mem_size(void *p)
{
	if (hf_in_arena(p))
		return hf_buddy.xSize(p);
	return (int)*(long long *)((char *)p - HF_HDR);
}

static void *hf_mem_realloc(void *p, int n)
{
	if (!hf_in_arena(p)) {
		long long *h = realloc((char *)p - HF_HDR, (size_t)n + HF_HDR);
		if (!h)
			return 0;
		h[0] = n;
		return (char *)h + HF_HDR;
	}
	void *q = n <= hf_largest ? hf_buddy.xRealloc(p, n) : 0;
	if (q)
		return q;
	q = hf_spill(n);
	if (!q)
		return 0;
	__atomic_add_fetch(&hf_moves, 1, __ATOMIC_RELAXED);
	int old = hf_buddy.xSize(p);
	memcpy(q, p, old < n ? old : n);
	hf_buddy.xFree(p);
	return q;
}

// SQLite rounds every request with this before it allocates, and uses the
// whole rounded size. memsys5's power of two where it can serve it;
// past its largest block, 16-byte steps: a spill of 12 MiB takes 12, not
// 16.
static int hf_mem_roundup(int n)
{
	if (n > hf_largest)
		return (n + 15) & ~15;
	return hf_buddy.xRoundup(n);
}

static int hf_mem_init(void *p) { return hf_buddy.xInit(hf_buddy.pAppData); }
static void hf_mem_shutdown(void *p) { hf_buddy.xShutdown(hf_buddy.pAppData); }

static const hf_mem_methods hf_mem = {
	hf_mem_malloc, hf_mem_free, hf_mem_realloc, hf_mem_size,
	hf_mem_roundup, hf_mem_init, hf_mem_shutdown, 0,
};

static int hf_has_memsys5(void) { return sqlite3_compileoption_used("ENABLE_MEMSYS5"); }

// hf_use_arena makes the arena SQLite's allocator: 1 when it did, 0 when
// this SQLite has no memsys5 (the system allocator stays), -1 on an error.
// It must run before SQLite initializes.
static int hf_use_arena(void)
{
	if (!hf_has_memsys5())
		return 0;
	// SQLITE_CONFIG_HEAP (8) with a 64-byte smallest block engages
	// memsys5 on the arena; SQLITE_CONFIG_GETMALLOC (5) reads its methods
	// back; SQLITE_CONFIG_MALLOC (4) puts the spilling front in their
	// place, which keeps the heap memsys5 initializes from.
	// memsys5's largest block (memsys5Init): the greatest power of two
	// of atoms that fits beside their control bytes.
	long blocks = HF_ARENA_BYTES / (HF_ATOM + 1), b = 1;
	while (b * 2 <= blocks)
		b *= 2;
	hf_largest = (int)(b * HF_ATOM);
	if (sqlite3_config(8, hf_arena, (int)sizeof hf_arena, HF_ATOM) != 0)
		return -1;
	if (sqlite3_config(5, &hf_buddy) == 0 && hf_buddy.xMalloc && sqlite3_config(4, &hf_mem) == 0)
		return 1;
	// Half configured: a null heap puts SQLite back on malloc.
	sqlite3_config(8, (void *)0, 0, 0);
	return -1;
}

static long hf_arena_spills(void) { return __atomic_load_n(&hf_spills, __ATOMIC_RELAXED); }
static long hf_arena_moves(void) { return __atomic_load_n(&hf_moves, __ATOMIC_RELAXED); }
static long hf_arena_largest(void) { return hf_largest; }
static long hf_arena_bytes(void) { return HF_ARENA_BYTES; }

// hf_sqlite_memory reports SQLite's memory in use and its high-water mark
// (SQLITE_STATUS_MEMORY_USED, 0).
static int hf_sqlite_memory(long long *cur, long long *hi, int reset)
{
	return sqlite3_status64(0, cur, hi, reset);
}
*/
import "C"

import "fmt"

// SQLite's memory (decision 81). A CLI call's SQLite makes and frees some
// hundreds of small allocations; with the system allocator each call paid
// for the allocator's set-up and growth, and musl's returned small groups
// to the kernel as soon as they emptied. When the bundled SQLite is built
// with SQLITE_ENABLE_MEMSYS5 (scripts/build.sh builds it so), its
// allocations come from an arena in the binary's zeroed data, served by
// SQLite's own buddy allocator (memsys5), and only what the arena can't
// hold (an allocation larger than its largest block, 4 MiB; a full or
// fragmented arena) spills to the system allocator, so no size of data
// fails for it.

// arenaState is what useArena found: 1 the arena is SQLite's allocator,
// 0 this SQLite has no memsys5, -1 it could not be configured.
var arenaState int

// useArena must run before the first SQLite call that initializes the
// library (driver.go's init calls it first).
func useArena() {
	arenaState = int(C.hf_use_arena())
}

// ArenaInfo describes where SQLite's memory comes from.
type ArenaInfo struct {
	// Engaged: SQLite allocates from the arena (a build with memsys5).
	Engaged bool
	// Bytes is the arena's size and Largest its largest block (larger
	// allocations always spill); Spills counts the allocations it could
	// not hold, which came from the system allocator instead, and Moves
	// those of them that were resizes out of the arena.
	Bytes, Largest, Spills, Moves int64
	// Used and Highwater are SQLite's memory in use and its most since
	// the process started, in bytes (the arena and the spills together).
	Used, Highwater int64
	// Err says why a build with memsys5 does not use the arena.
	Err error
}

// Memory names the allocator, as 'hostfork version' and doctor report
// it: "arena" when SQLite allocates from the arena, "system" when it
// uses malloc.
func (a ArenaInfo) Memory() string {
	if a.Engaged {
		return "arena"
	}
	return "system"
}

// Arena reports SQLite's allocator and memory.
func Arena() ArenaInfo {
	a := ArenaInfo{Engaged: arenaState == 1}
	if a.Engaged {
		a.Bytes = int64(C.hf_arena_bytes())
		a.Largest = int64(C.hf_arena_largest())
		a.Spills = int64(C.hf_arena_spills())
		a.Moves = int64(C.hf_arena_moves())
	}
	if arenaState < 0 {
		a.Err = fmt.Errorf("registry: SQLite has memsys5 but refused the arena (it was initialized before the registry's init); it allocates with malloc")
	}
	var cur, hi C.longlong
	if C.hf_sqlite_memory(&cur, &hi, 0) == 0 {
		a.Used, a.Highwater = int64(cur), int64(hi)
	}
	return a
}

// sqliteHasMemsys5 reports whether the bundled SQLite was compiled with
// SQLITE_ENABLE_MEMSYS5 (for tests).
func sqliteHasMemsys5() bool {
	return C.hf_has_memsys5() != 0
}

// resetHighwater starts SQLite's high-water mark again from the memory in
// use (for tests).
func resetHighwater() {
	var cur, hi C.longlong
	C.hf_sqlite_memory(&cur, &hi, 1)
}
