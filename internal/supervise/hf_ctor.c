/*
 * The dispatch of hostfork's C helper processes. hf_ctor runs as an ELF
 * constructor of every binary that links package supervise — the hostfork
 * CLI, any Go program that imports the library, their test binaries —
 * before the Go runtime starts (glibc passes argc, argv and envp to
 * constructors, as runc's nsexec relies on). When argv[1] names a helper,
 * it runs that helper and calls _exit(); otherwise it returns at once, at
 * the cost of one string comparison. So a program that imports hostfork
 * needs no dispatch of its own in main. A C library that passes no argv
 * leaves the dispatch to package supervise's init, which refuses the mode
 * with a clear error (NotDispatched).
 */
#include <string.h>
#include <unistd.h>

#include "hf.h"

__attribute__((constructor)) static void hf_ctor(int argc, char **argv)
{
	const char *mode = argc >= 2 && argv ? argv[1] : NULL;
	if (!mode || mode[0] != '_')
		return;
	if (!strcmp(mode, HF_GUARDIAN_MODE))
		_exit(hf_guardian_main());
	if (!strcmp(mode, HF_KEEPER_MODE))
		_exit(hf_keeper_main());
}
