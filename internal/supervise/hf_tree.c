/*
 * The tree stop of the C helpers: internal/tree's rules (its package doc;
 * supervise's TestTreeStopTable runs one table against both) for trees
 * whose roots are subreapers, the only ones the C stops: a guardian is its
 * tree's root, the keeper stops the guardians' trees. The kill starts with
 * cgroup.kill; members outside the cgroup are stopped (SIGSTOP) until two
 * listings agree, then killed; nothing is frozen; the caller repeats the
 * kill while members remain.
 */
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "hf.h"

/* hf_in_cgroup: 1 when pid's cgroup2 group is group (under mount), 2 when
 * it is below group, else 0. */
static int hf_in_cgroup(pid_t pid, const char *mount, const char *group)
{
	static char b[8192];
	char path[48];
	size_t lm = strlen(mount), lg = strlen(group);
	if (!lm || !lg || strncmp(group, mount, lm) || (group[lm] != '/' && group[lm]))
		return 0;
	const char *want = group + lm;
	snprintf(path, sizeof path, "/proc/%d/cgroup", (int)pid);
	if (hf_read_file(path, b, sizeof b) <= 0)
		return 0;
	char *rel = b;
	while ((rel = strstr(rel, "0::")) && rel != b && rel[-1] != '\n')
		rel += 3;
	if (!rel)
		return 0;
	rel += 3;
	size_t lr = strcspn(rel, "\n"), lw = strlen(want);
	if (lr < lw || strncmp(rel, want, lw))
		return 0;
	return lr == lw ? 1 : rel[lw] == '/' ? 2 : 0;
}

static int in_cgroup(struct hf_tree *t, pid_t pid) { return t->cgroup[0] && hf_in_cgroup(pid, t->mount, t->cgroup); }

/* next_pid is the next positive number of a list of them (cgroup.procs,
 * children; NUL-terminated) at *p, and moves *p past it; 0 at the end. */
static pid_t next_pid(const char **p)
{
	while (**p) {
		char *end;
		long v = strtol(*p, &end, 10);
		int ok = end > *p && v > 0 && v < 1 << 30;
		*p = end > *p ? end : *p + 1;
		if (ok)
			return (pid_t)v;
	}
	return 0;
}

/* each_entry calls fn with the name of every entry of the directory at
 * path that is a number, or (dirs) a subdirectory. */
static void each_entry(const char *path, int dirs, void (*fn)(const char *))
{
	DIR *d = opendir(path);
	struct dirent *e;
	while (d && (e = readdir(d)))
		if (dirs ? e->d_type == DT_DIR && e->d_name[0] != '.' : e->d_name[0] >= '1' && e->d_name[0] <= '9')
			fn(e->d_name);
	if (d)
		closedir(d);
}

/* A listing in progress. */
static struct listing {
	struct hf_tree *t;
	pid_t *out;
	int n, max, depth;
	const char *dir, *group;
} L;

static void add_out(pid_t pid)
{
	if (L.n < L.max)
		L.out[L.n] = pid;
	L.n++;
}

/* list_cgroup adds the processes of the group at path and of every group
 * below it. */
static void list_cgroup(const char *path);
static void list_subgroup(const char *name)
{
	char p[HF_MAX_PATH + 64];
	snprintf(p, sizeof p, "%s/%s", L.group, name);
	list_cgroup(p);
}

static void list_cgroup(const char *path)
{
	static char procs[65536];
	char p[HF_MAX_PATH + 64];
	pid_t pid;
	snprintf(p, sizeof p, "%s/cgroup.procs", path);
	if (L.depth >= 16 || hf_read_file(p, procs, sizeof procs) < 0)
		return;
	for (const char *s = procs; (pid = next_pid(&s)) > 0;)
		add_out(pid);
	const char *parent = L.group;
	L.depth++, L.group = path;
	each_entry(path, 1, list_subgroup);
	L.depth--, L.group = parent;
}

/* alive: not a zombie, or a zombie thread-group leader whose other threads
 * live on (after the main thread's pthread_exit, stat says Z and
 * num_threads still counts the others). */
static int alive(struct hf_stat *st) { return st->state != 'X' && (st->state != 'Z' || st->threads > 1); }

static int is_root(struct hf_tree *t, pid_t pid)
{
	for (int i = 0; i < t->nroots; i++)
		if (t->roots[i] == pid)
			return 1;
	return 0;
}

/* descendant re-reads the ancestry of one process now. */
static int descendant(struct hf_tree *t, pid_t pid)
{
	for (int n = 0; n < 4096 && pid > 1; n++) {
		struct hf_stat st;
		if (hf_read_stat(pid, &st) < 0)
			return 0;
		if (is_root(t, st.ppid))
			return 1;
		pid = st.ppid;
	}
	return 0;
}

static int is_member(struct hf_tree *t, pid_t pid)
{
	return !is_root(t, pid) && (in_cgroup(t, pid) || descendant(t, pid));
}

/* The breadth-first walk from the roots down. */
static pid_t bfs_q[HF_MAX_MEMBERS];
static int bfs_n;

static void queue_pid(pid_t pid)
{
	if (bfs_n < HF_MAX_MEMBERS)
		bfs_q[bfs_n++] = pid;
}

/* queue_children queues the children of one thread of process L.dir; a
 * file too large to read whole sends the listing to the /proc walk. */
static void queue_children(const char *name)
{
	static char b[65536];
	char p[96];
	snprintf(p, sizeof p, "/proc/%s/task/%s/children", L.dir, name);
	int n = hf_read_file(p, b, sizeof b);
	pid_t pid;
	for (const char *s = n > 0 ? b : ""; (pid = next_pid(&s)) > 0;)
		queue_pid(pid);
	if (n >= (int)sizeof b - 1)
		bfs_n = HF_MAX_MEMBERS;
}

static void add_descendant(const char *name)
{
	pid_t pid = (pid_t)atoi(name);
	struct hf_stat st;
	if (hf_read_stat(pid, &st) == 0 && alive(&st) && !is_root(L.t, pid) && descendant(L.t, pid))
		add_out(pid);
}

/* list_descendants adds the live descendants of the roots, following the
 * children files (a child belongs to the thread that forked it, so every
 * thread's file is read): the cost is the tree's size, not the host's.
 * Dead zombies are left out and not looked into (they have handed their
 * children on). Without the files, or for a tree larger than the queue, it
 * walks all of /proc. */
static void list_descendants(struct hf_tree *t)
{
	static int have = -1;
	char p[64];
	if (have < 0) /* every thread has the file when the kernel has them */
		have = access("/proc/thread-self/children", F_OK) == 0;
	bfs_n = 0;
	for (int i = 0; i < t->nroots; i++)
		queue_pid(t->roots[i]);
	for (int i = 0; have && i < bfs_n && bfs_n < HF_MAX_MEMBERS; i++) {
		char name[16];
		struct hf_stat st;
		if (hf_read_stat(bfs_q[i], &st) < 0 || !alive(&st))
			continue; /* gone, or a dead zombie */
		if (i >= t->nroots)
			add_out(bfs_q[i]);
		snprintf(name, sizeof name, "%d", (int)bfs_q[i]);
		L.dir = name;
		snprintf(p, sizeof p, "/proc/%s/task", name);
		if (st.threads == 1 && st.state != 'Z')
			queue_children(name);
		else
			each_entry(p, 0, queue_children);
	}
	if (!have || bfs_n >= HF_MAX_MEMBERS)
		each_entry("/proc", 0, add_descendant);
}

static int cmp_pid(const void *a, const void *b)
{
	return *(const pid_t *)a - *(const pid_t *)b; /* PIDs: positive, at most 2^22 */
}

int hf_tree_list(struct hf_tree *t, pid_t *out, int max)
{
	L = (struct listing){.t = t, .out = out, .max = max};
	if (t->cgroup[0])
		list_cgroup(t->cgroup);
	if (t->nroots > 0)
		list_descendants(t);
	int k = L.n < max ? L.n : max, w = 0;
	qsort(out, (size_t)k, sizeof out[0], cmp_pid);
	for (int i = 0; i < k; i++)
		if ((w == 0 || out[w - 1] != out[i]) && !is_root(t, out[i]))
			out[w++] = out[i];
	return w;
}

static pid_t members[HF_MAX_MEMBERS], again[HF_MAX_MEMBERS];

/* signal_member signals pid through a pidfd if it is still a member after
 * the open (the pidfd pins the PID, so the check is about this process). */
static void signal_member(struct hf_tree *t, pid_t pid, int sig)
{
	int fd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (fd >= 0 && is_member(t, pid))
		syscall(SYS_pidfd_send_signal, fd, sig, NULL, 0);
	if (fd >= 0)
		close(fd);
}

void hf_tree_signal(struct hf_tree *t, int sig)
{
	int n = hf_tree_list(t, members, HF_MAX_MEMBERS);
	for (int i = 0; i < n; i++)
		signal_member(t, members[i], sig);
}

/* outside lists the members outside the cgroup (all of them without one)
 * into out; *total is the number of members. */
static int outside(struct hf_tree *t, pid_t *out, int *total)
{
	int n = hf_tree_list(t, out, HF_MAX_MEMBERS), w = 0;
	for (int i = 0; i < n; i++)
		if (!in_cgroup(t, out[i]))
			out[w++] = out[i];
	*total = n;
	return w;
}

int hf_tree_kill(struct hf_tree *t)
{
	char p[HF_MAX_PATH + 32];
	int total, ignored;
	snprintf(p, sizeof p, "%s/cgroup.kill", t->cgroup);
	if (t->cgroup[0])
		hf_write_file(p, "1");
	int n = outside(t, members, &total);
	t->stable = 0;
	for (int round = 0; round < 10 && !t->stable; round++) {
		/* Members outside the cgroup escaped its kill: stop them, so
		 * that they can't fork, until two listings agree. */
		for (int i = 0; i < n; i++)
			signal_member(t, members[i], SIGSTOP);
		int m = outside(t, again, &ignored);
		t->stable = m == n && !memcmp(members, again, (size_t)n * sizeof members[0]);
		memcpy(members, again, (size_t)m * sizeof members[0]);
		n = m;
	}
	t->outsiders = t->cgroup[0] ? n : 0;
	for (int i = 0; i < n; i++)
		signal_member(t, members[i], SIGKILL);
	return total;
}

int hf_tree_populated(struct hf_tree *t) { return hf_tree_list(t, members, HF_MAX_MEMBERS) > 0; }

int hf_queue_stop(int pidfd, int reason, int notice, int64_t grace_ns)
{
	siginfo_t si;
	memset(&si, 0, sizeof si);
	int64_t g = grace_ns / (10 * NS_PER_MS);
	g = g < 0 ? 0 : g > (1 << 22) - 1 ? (1 << 22) - 1 : g;
	si.si_signo = SIGTERM;
	si.si_code = SI_QUEUE;
	si.si_pid = getpid();
	si.si_uid = getuid();
	si.si_value.sival_int = (reason & 0xff) | (notice ? HF_STOP_NOTICE : 0) | (int)(g << HF_GRACE_SHIFT);
	return (int)syscall(SYS_pidfd_send_signal, pidfd, SIGTERM, &si, 0);
}

void hf_stop_guardians(const char *mount, const char *group, pid_t skip, int reason, int64_t grace, struct hf_tree *roots)
{
	static char procs[65536];
	char p[HF_MAX_PATH + 32];
	snprintf(p, sizeof p, "%s/cgroup.procs", group);
	if (hf_read_file(p, procs, sizeof procs) < 0)
		return;
	pid_t pid;
	for (const char *s = procs; (pid = next_pid(&s)) > 0;) {
		int fd = pid != skip ? (int)syscall(SYS_pidfd_open, pid, 0) : -1;
		/* Still a guardian of this environment after the open. */
		if (fd >= 0 && hf_in_cgroup(pid, mount, group) == 1) {
			hf_queue_stop(fd, reason, 0, grace);
			if (roots && roots->nroots < HF_MAX_ROOTS)
				roots->roots[roots->nroots++] = pid;
		}
		if (fd >= 0)
			close(fd);
	}
}
