/*
 * The tree-stop mechanism of the C helpers, rule for rule the same as the Go
 * one in internal/tree (DESIGN.md, "Stop"):
 *
 *   - membership is the whole cgroup2 subtree (nested groups included) and
 *     every live descendant of the tree's roots (a guardian is its tree's
 *     subreaper, so a process that left the cgroup is still found), found
 *     through the children files from the roots down (all of /proc is
 *     walked only on a kernel without them);
 *   - every signal goes through a pidfd, opened first and then re-checked
 *     for membership, so a PID reused after an exit is never signalled;
 *   - the kill step of a tree whose members are all in its cgroup is
 *     cgroup.kill alone (atomic against forks); otherwise it quiesces first
 *     (cgroup.freeze, SIGSTOP for members outside the cgroup), lists until
 *     two listings agree, kills every listed member and the cgroup
 *     (cgroup.kill), and thaws only what it froze; the caller repeats it
 *     while members remain.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "hf.h"

#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

/* ---- the cgroup side ---- */

/* rel_of is t->cgroup relative to its mount ("/hostfork/e/commands/c"). */
static const char *rel_of(struct hf_tree *t)
{
	size_t lm = strlen(t->mount);
	if (lm > 0 && !strncmp(t->cgroup, t->mount, lm) && (t->cgroup[lm] == '/' || t->cgroup[lm] == 0))
		return t->cgroup + lm;
	return NULL;
}

/* in_cgroup reports whether pid's cgroup2 group is t->cgroup or below it. */
static int in_cgroup(struct hf_tree *t, pid_t pid)
{
	static char b[8192];
	char path[48];
	const char *want = t->cgroup[0] ? rel_of(t) : NULL;
	if (!want || !*want)
		return 0;
	snprintf(path, sizeof path, "/proc/%d/cgroup", (int)pid);
	int n = hf_read_file(path, b, sizeof b);
	if (n <= 0)
		return 0;
	size_t lw = strlen(want);
	for (char *line = b; line && *line;) {
		char *nl = strchr(line, '\n');
		if (nl)
			*nl = 0;
		if (!strncmp(line, "0::", 3)) {
			char *rel = line + 3;
			size_t lr = strlen(rel);
			while (lr > 0 && (rel[lr - 1] == ' ' || rel[lr - 1] == '\r'))
				rel[--lr] = 0;
			return !strncmp(rel, want, lw) && (rel[lw] == 0 || rel[lw] == '/');
		}
		line = nl ? nl + 1 : NULL;
	}
	return 0;
}

static int add_member(pid_t *out, int n, int max, pid_t pid)
{
	if (n < max)
		out[n] = pid;
	return n + 1;
}

#define MAX_DEPTH 16
static char dents[MAX_DEPTH][8192];

/* list_cgroup appends the processes of the group at path and of every
 * group below it. */
static int list_cgroup(const char *path, int depth, pid_t *out, int n, int max)
{
	static char procs[65536];
	char p[HF_MAX_PATH + 64];
	if (depth >= MAX_DEPTH)
		return n;
	snprintf(p, sizeof p, "%s/cgroup.procs", path);
	int len = hf_read_file(p, procs, sizeof procs);
	int64_t cur = -1;
	for (int i = 0; len > 0 && i <= len; i++) {
		char c = i < len ? procs[i] : '\n';
		if (c >= '0' && c <= '9') {
			cur = (cur < 0 ? 0 : cur) * 10 + (c - '0');
			if (cur > 1 << 30)
				cur = 1 << 30;
		} else if (cur > 0) {
			n = add_member(out, n, max, (pid_t)cur);
			cur = -1;
		}
	}
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return n;
	for (;;) {
		long got = syscall(SYS_getdents64, fd, dents[depth], sizeof dents[depth]);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		for (long off = 0; off < got;) {
			unsigned short reclen;
			memcpy(&reclen, dents[depth] + off + 16, sizeof reclen);
			unsigned char type = (unsigned char)dents[depth][off + 18];
			const char *name = dents[depth] + off + 19;
			off += reclen;
			if (type != 4 /* DT_DIR */ || name[0] == '.')
				continue;
			snprintf(p, sizeof p, "%s/%s", path, name);
			n = list_cgroup(p, depth + 1, out, n, max);
		}
	}
	close(fd);
	return n;
}

/* ---- the ancestry side ---- */

/* The live processes of the host, (pid, ppid), from /proc. */
static int32_t pr_pid[HF_MAX_MEMBERS], pr_ppid[HF_MAX_MEMBERS];
static uint8_t pr_memo[HF_MAX_MEMBERS]; /* 0 unknown, 1 descendant, 2 not */
static uint8_t pr_live[HF_MAX_MEMBERS];

/* proc_alive: not a zombie, or a zombie thread-group leader whose other
 * threads live on (after the main thread's pthread_exit, stat says Z and
 * num_threads still counts the others). */
static int proc_alive(char st, int threads)
{
	return st != 'X' && (st != 'Z' || threads > 1);
}
static int pr_n;

/* each_id_entry calls fn(id, arg) for every entry of the directory at path
 * whose name is a positive number (a PID or a TID), reading it through buf;
 * it returns -1 when the directory can't be opened. */
static int each_id_entry(const char *path, char *buf, size_t cap, void (*fn)(int64_t id, void *arg), void *arg)
{
	int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	for (;;) {
		long n = syscall(SYS_getdents64, fd, buf, cap);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		for (long off = 0; off < n;) {
			unsigned short reclen;
			memcpy(&reclen, buf + off + 16, sizeof reclen);
			const char *name = buf + off + 19;
			off += reclen;
			int64_t v;
			if (name[0] >= '1' && name[0] <= '9' && hf_parse_i64(name, &v) == 0)
				fn(v, arg);
		}
	}
	close(fd);
	return 0;
}

/* add_proc adds one process of /proc to the table. */
static void add_proc(int64_t v, void *arg)
{
	(void)arg;
	char st;
	pid_t pp;
	int threads = 0;
	/* Zombies stay in the table: a zombie leader's other threads may
	 * have forked children that name it. */
	if (pr_n == HF_MAX_MEMBERS || hf_read_stat_full((pid_t)v, &st, &pp, &threads, NULL) < 0)
		return;
	pr_pid[pr_n] = (int32_t)v;
	pr_ppid[pr_n] = pp;
	pr_memo[pr_n] = 0;
	pr_live[pr_n] = (uint8_t)proc_alive(st, threads);
	pr_n++;
}

static void list_procs(void)
{
	static char buf[16384];
	pr_n = 0;
	if (each_id_entry("/proc", buf, sizeof buf, add_proc, NULL) < 0)
		return;
	/* /proc lists in ascending order in practice; keep it sorted anyway. */
	for (int i = 1; i < pr_n; i++) {
		for (int j = i; j > 0 && pr_pid[j - 1] > pr_pid[j]; j--) {
			int32_t x = pr_pid[j];
			pr_pid[j] = pr_pid[j - 1];
			pr_pid[j - 1] = x;
			x = pr_ppid[j];
			pr_ppid[j] = pr_ppid[j - 1];
			pr_ppid[j - 1] = x;
			uint8_t l = pr_live[j];
			pr_live[j] = pr_live[j - 1];
			pr_live[j - 1] = l;
		}
	}
}

static int proc_index(int32_t pid)
{
	int lo = 0, hi = pr_n - 1;
	while (lo <= hi) {
		int mid = lo + (hi - lo) / 2;
		if (pr_pid[mid] == pid)
			return mid;
		if (pr_pid[mid] < pid)
			lo = mid + 1;
		else
			hi = mid - 1;
	}
	return -1;
}

static int is_root(struct hf_tree *t, pid_t pid)
{
	for (int i = 0; i < t->nroots; i++)
		if (t->roots[i] == pid)
			return 1;
	return 0;
}

/* table_descendant answers from the /proc table, with memoization. */
static int table_descendant(struct hf_tree *t, int i)
{
	if (pr_memo[i])
		return pr_memo[i] == 1;
	int32_t p = pr_ppid[i];
	int r = 0;
	for (int n = 0; p > 0 && n < 4096; n++) {
		if (is_root(t, p)) {
			r = 1;
			break;
		}
		int k = proc_index(p);
		if (k < 0)
			break;
		if (pr_memo[k]) {
			r = pr_memo[k] == 1;
			break;
		}
		p = pr_ppid[k];
	}
	pr_memo[i] = r ? 1 : 2;
	return r;
}

/* live_descendant re-reads the ancestry of one process now. */
static int live_descendant(struct hf_tree *t, pid_t pid)
{
	for (int n = 0; n < 4096 && pid > 1; n++) {
		pid_t pp;
		if (hf_read_stat(pid, NULL, &pp, NULL) < 0)
			return 0;
		if (is_root(t, pp))
			return 1;
		pid = pp;
	}
	return 0;
}

static int is_member(struct hf_tree *t, pid_t pid)
{
	if (is_root(t, pid))
		return 0;
	return in_cgroup(t, pid) || (t->nroots > 0 && live_descendant(t, pid));
}

/* ---- the children files (CONFIG_PROC_CHILDREN) ---- */

static int children_files(void)
{
	static int have = -1;
	if (have < 0) {
		char p[64];
		snprintf(p, sizeof p, "/proc/%d/task/%d/children", (int)getpid(), (int)getpid());
		have = access(p, F_OK) == 0;
	}
	return have;
}

static pid_t bfs_q[HF_MAX_MEMBERS];
static int bfs_overflow; /* a child did not fit in the queue */

/* append_children appends the PIDs of one children file to the queue. */
static int append_children(const char *path, int qn)
{
	char buf[4096];
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return qn;
	int64_t cur = -1;
	for (;;) {
		ssize_t got = read(fd, buf, sizeof buf);
		if (got < 0 && errno == EINTR)
			continue;
		if (got <= 0)
			break;
		for (ssize_t i = 0; i < got; i++) {
			char c = buf[i];
			if (c >= '0' && c <= '9') {
				cur = (cur < 0 ? 0 : cur) * 10 + (c - '0');
				if (cur > 1 << 30)
					cur = 1 << 30;
				continue;
			}
			if (cur > 0) {
				if (qn < HF_MAX_MEMBERS)
					bfs_q[qn++] = (pid_t)cur;
				else
					bfs_overflow = 1;
			}
			cur = -1;
		}
	}
	if (cur > 0) {
		if (qn < HF_MAX_MEMBERS)
			bfs_q[qn++] = (pid_t)cur;
		else
			bfs_overflow = 1;
	}
	close(fd);
	return qn;
}

/* add_task_children queues the children of one thread of w->pid. */
struct task_walk {
	pid_t pid;
	int qn;
};

static void add_task_children(int64_t tid, void *arg)
{
	struct task_walk *w = arg;
	char cp[96];
	snprintf(cp, sizeof cp, "/proc/%d/task/%lld/children", (int)w->pid, (long long)tid);
	w->qn = append_children(cp, w->qn);
}

/* list_descendants follows the children files down from the roots (a
 * child belongs to the thread that forked it, so every thread's file is
 * read unless the process has one thread): the cost is the tree's size,
 * not the host's. Dead zombies are left out and not looked into (they have
 * handed their children on); a zombie leader whose other threads live on
 * is alive (proc_alive). It returns -1 when the
 * tree does not fit in the queue (the caller walks /proc instead). */
static int list_descendants(struct hf_tree *t, pid_t *out, int n, int max)
{
	static char tdents[8192];
	int qn = 0;
	bfs_overflow = 0;
	for (int i = 0; i < t->nroots && qn < HF_MAX_MEMBERS; i++)
		bfs_q[qn++] = t->roots[i];
	for (int i = 0; i < qn; i++) {
		pid_t pid = bfs_q[i];
		char st = 0;
		int threads = 0;
		if (hf_read_stat_full(pid, &st, NULL, &threads, NULL) < 0)
			continue; /* gone */
		if (i >= t->nroots && proc_alive(st, threads))
			n = add_member(out, n, max, pid);
		if (!proc_alive(st, threads))
			continue; /* a dead zombie has handed its children on */
		char p[96];
		if (threads == 1 && st != 'Z') {
			snprintf(p, sizeof p, "/proc/%d/task/%d/children", (int)pid, (int)pid);
			qn = append_children(p, qn);
			continue;
		}
		snprintf(p, sizeof p, "/proc/%d/task", (int)pid);
		struct task_walk w = {pid, qn};
		each_id_entry(p, tdents, sizeof tdents, add_task_children, &w);
		qn = w.qn;
	}
	return bfs_overflow ? -1 : n;
}

static int cmp_pid(const void *a, const void *b)
{
	pid_t x = *(const pid_t *)a, y = *(const pid_t *)b;
	return x < y ? -1 : x > y;
}

int hf_tree_list(struct hf_tree *t, pid_t *out, int max)
{
	int n = 0;
	if (t->cgroup[0])
		n = list_cgroup(t->cgroup, 0, out, n, max);
	int walked = 0;
	if (t->nroots > 0 && children_files()) {
		int m = list_descendants(t, out, n, max);
		if (m >= 0) {
			n = m;
			walked = 1;
		}
	}
	if (t->nroots > 0 && !walked) {
		/* Without the children files (or for a tree too large for the
		 * queue): walk all of /proc. */
		list_procs();
		for (int i = 0; i < pr_n; i++)
			if (pr_live[i] && !is_root(t, pr_pid[i]) && table_descendant(t, i))
				n = add_member(out, n, max, pr_pid[i]);
	}
	int k = n < max ? n : max;
	qsort(out, (size_t)k, sizeof out[0], cmp_pid);
	int w = 0;
	for (int i = 0; i < k; i++)
		if (w == 0 || out[w - 1] != out[i])
			out[w++] = out[i];
	for (int i = 0; i < w;) {
		if (is_root(t, out[i]))
			memmove(out + i, out + i + 1, (size_t)(--w - i) * sizeof out[0]);
		else
			i++;
	}
	return w;
}

static pid_t members[HF_MAX_MEMBERS], again[HF_MAX_MEMBERS];

/* signal_member signals pid through a pidfd if it is still a member after
 * the open (the pidfd pins the PID, so the check is about this process). */
static int signal_member(struct hf_tree *t, pid_t pid, int sig)
{
	int fd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (fd < 0)
		return 0;
	int ok = is_member(t, pid) && syscall(SYS_pidfd_send_signal, fd, sig, NULL, 0) == 0;
	close(fd);
	return ok;
}

int hf_tree_signal(struct hf_tree *t, int sig)
{
	int n = hf_tree_list(t, members, HF_MAX_MEMBERS);
	int done = 0;
	for (int i = 0; i < n; i++)
		done += signal_member(t, members[i], sig);
	return done;
}

static int cgroup_frozen(struct hf_tree *t)
{
	static char b[512];
	char p[HF_MAX_PATH + 32];
	snprintf(p, sizeof p, "%s/cgroup.events", t->cgroup);
	if (hf_read_file(p, b, sizeof b) <= 0)
		return 1; /* gone: nothing to wait for */
	return strstr(b, "frozen 1") != NULL || strstr(b, "populated 0") != NULL;
}

static int write_ctl(struct hf_tree *t, const char *file, const char *val)
{
	char p[HF_MAX_PATH + 32];
	snprintf(p, sizeof p, "%s/%s", t->cgroup, file);
	return hf_write_fileat(AT_FDCWD, p, val);
}

int hf_tree_kill(struct hf_tree *t)
{
	t->froze = 0;
	t->stable = 0;
	t->outsiders = 0;
	if (t->cgroup[0]) {
		/* Every member inside the cgroup: cgroup.kill alone ends them,
		 * atomically against forks; nothing to quiesce. */
		int n = hf_tree_list(t, members, HF_MAX_MEMBERS);
		int all = n > 0 && n <= HF_MAX_MEMBERS;
		for (int i = 0; all && i < n; i++)
			if (!in_cgroup(t, members[i]))
				all = 0;
		if (all && write_ctl(t, "cgroup.kill", "1") == 0) {
			t->stable = 1;
			return n;
		}
	}
	if (t->cgroup[0] && write_ctl(t, "cgroup.freeze", "1") == 0) {
		t->froze = 1;
		for (int i = 0; i < 100 && !cgroup_frozen(t); i++)
			sleep_ms(5);
	}
	int n = hf_tree_list(t, members, HF_MAX_MEMBERS);
	for (int round = 0; round < 10; round++) {
		/* Members outside the cgroup are not frozen: stop them. */
		for (int i = 0; i < n && i < HF_MAX_MEMBERS; i++)
			if (!in_cgroup(t, members[i]))
				signal_member(t, members[i], SIGSTOP);
		int m = hf_tree_list(t, again, HF_MAX_MEMBERS);
		if (m == n && !memcmp(members, again, (size_t)(n < HF_MAX_MEMBERS ? n : HF_MAX_MEMBERS) * sizeof members[0])) {
			t->stable = 1;
			break;
		}
		memcpy(members, again, (size_t)(m < HF_MAX_MEMBERS ? m : HF_MAX_MEMBERS) * sizeof members[0]);
		n = m;
		sleep_ms(2);
	}
	if (t->cgroup[0])
		write_ctl(t, "cgroup.kill", "1");
	int killed = 0;
	for (int i = 0; i < n && i < HF_MAX_MEMBERS; i++) {
		if (t->cgroup[0] && !in_cgroup(t, members[i]))
			t->outsiders++;
		killed += signal_member(t, members[i], SIGKILL);
	}
	if (t->froze)
		write_ctl(t, "cgroup.freeze", "0");
	return n > killed ? n : killed;
}

int hf_tree_populated(struct hf_tree *t)
{
	return hf_tree_list(t, members, HF_MAX_MEMBERS) > 0;
}

int hf_queue_stop(int pidfd, int reason, int notice, int64_t grace_ns)
{
	siginfo_t si;
	memset(&si, 0, sizeof si);
	int64_t g = grace_ns / (10 * NS_PER_MS);
	if (g < 0)
		g = 0;
	if (g > (1 << 22) - 1)
		g = (1 << 22) - 1;
	si.si_signo = SIGTERM;
	si.si_code = SI_QUEUE;
	si.si_pid = getpid();
	si.si_uid = getuid();
	si.si_value.sival_int = (reason & 0xff) | (notice ? HF_STOP_NOTICE : 0) | (int)(g << HF_GRACE_SHIFT);
	return (int)syscall(SYS_pidfd_send_signal, pidfd, SIGTERM, &si, 0);
}
