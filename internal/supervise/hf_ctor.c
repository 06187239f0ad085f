/*
 * The dispatch of hostfork's C helper processes. hf_ctor runs as an ELF
 * constructor of every binary that links package supervise — the hostfork
 * CLI, any Go program that imports the library, their test binaries —
 * before the Go runtime starts (glibc passes argc, argv and envp to
 * constructors, as runc's nsexec relies on). When argv[1] names a helper,
 * it runs that helper and calls _exit(); otherwise it returns at once, at
 * the cost of one string comparison. So a program that imports hostfork
 * needs no dispatch of its own in main.
 */
#define _GNU_SOURCE
#include <string.h>
#include <unistd.h>

#include "hf.h"

/* cmdline_arg1 is the fallback for a libc that does not pass argv to
 * constructors: argv[1] from /proc/self/cmdline. */
static int cmdline_arg1(char *out, size_t cap)
{
	char b[256];
	int n = hf_read_file("/proc/self/cmdline", b, sizeof b);
	if (n <= 0)
		return -1;
	size_t l0 = strnlen(b, (size_t)n);
	if ((int)l0 + 1 >= n)
		return -1;
	return hf_copy_bounded(out, cap, b + l0 + 1);
}

__attribute__((constructor)) static void hf_ctor(int argc, char **argv, char **envp)
{
	(void)envp;
	char buf[64];
	const char *mode = NULL;
	if (argc > 0 && argv) {
		mode = argc >= 2 ? argv[1] : NULL;
	} else if (cmdline_arg1(buf, sizeof buf) == 0) {
		mode = buf;
	}
	if (!mode || mode[0] != '_')
		return;
	if (!strcmp(mode, HF_GUARDIAN_MODE))
		_exit(hf_guardian_main());
	if (!strcmp(mode, HF_KEEPER_MODE))
		_exit(hf_keeper_main());
}
