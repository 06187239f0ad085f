package main

// The hostfork CLI keeps glibc's malloc to one arena (docs/decisions.md,
// entry 68). Each thread that first calls malloc gets an arena of its own
// (up to eight per core): a 64 MiB reservation, trimmed to alignment and
// partly made writable, so three or four more mappings and page-table
// updates per thread. SQLite's allocations run on whichever thread makes
// the cgo call, so a CLI call made four or five arenas. With one P the
// threads never allocate at the same moment, so one arena costs no
// contention. A user's own (non-empty) MALLOC_ARENA_MAX or
// glibc.malloc.arena_max tunable is left to win.
//
// It is a constructor of this binary alone, not of the library: a program
// that imports hostfork decides for itself how its malloc behaves. It
// does nothing in the helper modes (the guardian and the keeper, argv[1]
// "__hostfork_…"), which run a few pages of C.

/*
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

__attribute__((constructor)) static void hf_one_arena(int argc, char **argv)
{
	if (argc >= 2 && argv && argv[1] && argv[1][0] == '_' && argv[1][1] == '_')
		return; // a helper mode (internal/supervise dispatches it)
#ifdef M_ARENA_MAX
	const char *m = getenv("MALLOC_ARENA_MAX"), *t = getenv("GLIBC_TUNABLES");
	if ((m && m[0]) || (t && strstr(t, "malloc.arena_max")))
		return;
	mallopt(M_ARENA_MAX, 1);
#endif
}

// hf_malloc_arenas counts the arenas malloc_info reports (-1: unknown).
static int hf_malloc_arenas(void)
{
#ifndef __GLIBC__
	return -1;
#else
	char *buf = NULL;
	size_t len = 0;
	FILE *f = open_memstream(&buf, &len);
	if (!f)
		return -1;
	int n = -1;
	if (malloc_info(0, f) == 0 && fflush(f) == 0) {
		n = 0;
		for (const char *p = buf; (p = strstr(p, "<heap nr=")) != NULL; p++)
			n++;
	}
	fclose(f);
	free(buf);
	return n;
#endif
}
*/
import "C"

// mallocArenas is the number of malloc arenas of this process (-1:
// unknown), for TestOneArena.
func mallocArenas() int { return int(C.hf_malloc_arenas()) }
