#!/usr/bin/env bash
# Decision 73: what a durable commit's sync of the WAL costs, by kind of
# sync and by whether the commit's frames overwrite the file (a WAL that
# SQLite restarted in place after a checkpoint) or append to it (a WAL
# that was truncated). A C loop writes 10 frames of 4,120 bytes, syncs,
# sleeps 2 ms, 300 times, and prints the median and p90 of the syncs,
# on the store's filesystem (BENCH_TMP, default /var/tmp) and on a
# journaled ext4 on a loop device the script makes (the filesystem most
# hosts run; the root disk of the project's VMs has no journal).
#
# usage: bench/wal-sync.sh   (root, for the loop device)
source "$(dirname "$0")/lib.sh"
need gcc mkfs.ext4 losetup
cat >"$work/walsync.c" <<'C'
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec * 1e6 + t.tv_nsec / 1e3; }
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
int main(int argc, char **argv) {
	enum { N = 300, FRAME = 4120, FRAMES = 10 };
	static char p[FRAME];
	static double t[N];
	memset(p, 1, sizeof p);
	const char *what[] = {"fsync, overwrite", "fdatasync, overwrite", "fsync, append", "fdatasync, append"};
	for (int mode = 0; mode < 4; mode++) {
		int fd = open(argv[1], O_RDWR | O_CREAT | O_TRUNC, 0600);
		if (fd < 0) { perror(argv[1]); return 1; }
		if (mode < 2) { for (int i = 0; i < 300; i++) if (write(fd, p, FRAME) != FRAME) return 1; fsync(fd); }
		off_t o = 0;
		for (int i = 0; i < N; i++) {
			for (int k = 0; k < FRAMES; k++, o += FRAME) if (pwrite(fd, p, FRAME, o) != FRAME) return 1;
			if (mode < 2 && o > (off_t)FRAME * 250) o = 0;
			double a = now();
			if (mode % 2 ? fdatasync(fd) : fsync(fd)) { perror("sync"); return 1; }
			t[i] = now() - a;
			usleep(2000);
		}
		close(fd);
		qsort(t, N, sizeof t[0], cmp);
		printf("| %s | %s | %.0f | %.0f |\n", argv[2], what[mode], t[N / 2], t[N * 9 / 10]);
	}
	unlink(argv[1]);
	return 0;
}
C
gcc -O2 -o "$work/walsync" "$work/walsync.c"
header "a WAL commit's sync: 10 frames, then fsync or fdatasync (300 each)"
echo "| filesystem | sync | median µs | p90 µs |"
echo "|---|---|---|---|"
"$work/walsync" "$work/wal" "$(df --output=fstype "$work" | tail -1) ($(df --output=source "$work" | tail -1))"
truncate -s 512M "$work/ext4.img"
mkfs.ext4 -q -F "$work/ext4.img"
dev=$(losetup -f --show "$work/ext4.img")
on_exit losetup -d "$dev"
mkdir "$work/mnt"
mount "$dev" "$work/mnt"
on_exit umount "$work/mnt"
"$work/walsync" "$work/mnt/wal" "ext4 with a journal (loop device)"
echo "load after: $(load)"
