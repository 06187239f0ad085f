/*
 * The guardian: one small supervisor per command, a hidden mode of every
 * binary that links package supervise (hf_ctor.c; doc.go). Single-threaded:
 * one poll loop over a signalfd (SIGCHLD, SIGTERM), a timerfd, the control
 * pipe and, in pipe mode, the tee pipes; no heap but the C library's
 * opendir in a tree listing. Its tree stops are hf_tree.c's; its wire
 * format is documented in protocol.go.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "hf.h"

#define HF_CLONE_INTO_CGROUP 0x200000000ULL
#define HF_CLOSE_RANGE_CLOEXEC (1U << 2)

/* struct clone_args of <linux/sched.h> (CLONE_ARGS_SIZE_VER2). */
struct hf_clone_args {
	uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack,
	    stack_size, tls, set_tid, set_tid_size, cgroup;
};

#define ERRMSG_MAX 2048

/* ---- configuration (from the release message) ---- */

static struct {
	char command_id[HF_MAX_ID + 1];
	char env_id[HF_MAX_ID + 1];
	char guardians[HF_MAX_PATH + 1]; /* the environment's guardians group */
	/* Valid until the release is unmapped: the executable, its directory,
	 * argv, env and the v1 groups the workload joins. */
	const char *path, *cwd;
	struct hf_vec argv, envp, join;
	int pipe_mode, inherit_mode, owner_stop, foreground, auto_stop;
	int view_userns; /* the view is a rootless keeper's: join its user namespace too */
	int64_t view_pid, view_start, deadline_ns, timeout_ns, grace_ns, idle_ns;
	char oom_file[HF_MAX_PATH + 1]; /* the command's own file with an oom_kill line */
	/* The environment's moved deadline (hostfork extend): the mover
	 * replaces this file atomically, then pokes us with HF_SIG_DEADLINE;
	 * it is read at the release too, so a launch racing a move can't keep
	 * the old one. The timer is re-armed by the loop. */
	char deadline_file[HF_MAX_PATH + 1];
} cfg;

/* OOM attribution (decisions 49, 79): the command's oom_kill counter,
 * sampled every OOM_SAMPLE while the leader lives; a leader dead of
 * SIGKILL was the OOM killer's victim when the counter rose since the last
 * sample (-1: unknown). When the guardian first sees the leader dying or
 * dead more than OOM_FRESH after its last kept sample (it was starved), or
 * can't read the counter, or never kept a sample, the receipt has
 * leader_oom_stale_ms (that age) and no leader_oom. */
#define OOM_SAMPLE (10 * NS_PER_MS)
static int64_t oom_last = -1, oom_next = INT64_MAX;
static int leader_oom = -1;
#define OOM_FRESH (2 * OOM_SAMPLE)
static int64_t oom_last_at, oom_touched_at, leader_oom_stale_ms;

static struct hf_msg rel;

/* Idle timeout: the last observed activity (output, input, the tree's
 * reads and writes, forwarded signals), counted from the workload's start;
 * output written straight to files, and the tree's I/O counters, are
 * checked every idle/8 (at least 100 ms). */
static int64_t last_activity, idle_sizes[2];
static uint64_t idle_io;
static int idle_fired;

/* ---- state ---- */

static pid_t self_pid, leader_pid;
static int leader_alive, no_children;
static int stop_reason; /* first stop reason (HF_R_*) */
static int stop_phase;  /* 0 none, 1 SIGTERM sent, 2 killed */
static int notified;    /* an outside stopper announced its stop */
static int64_t kill_at, rekill_at, backup_at = INT64_MAX, timer_armed = INT64_MAX;
static int rekill, rekill_rounds, soft_fired, timeout_fired;
static int sfd = -1, tfd = -1, ctl_open = 1;
static struct hf_tree tree;

/* The receipt (protocol.go, Receipt). */
static struct {
	char boot_id[HF_MAX_ID + 1];
	struct stat proof; /* the receipt file's: device and inode */
	uint64_t workload_start;
	char start_error[ERRMSG_MAX];
	int code, signal, complete; /* code -1, signal 0: none */
	int after_stop, outsiders, unstable;
	struct timespec leader_at, tree_at; /* zero: not yet */
} R = {.code = -1};
static char rec_buf[16 << 10];
static size_t rec_len, rec_end; /* the last receipt written; the one being built */
/* The artifact files may be shorter than the output: a write to them
 * failed (pipe mode), or their filesystem was full when the tree exited
 * (files mode: the workload writes them itself and gets the error). */
int hf_output_truncated;
#define RECEIPT_MIN 512

/* Pipe mode: the workload writes into src; the guardian copies to the
 * artifact file and, while it accepts data, to the forward pipe. */
static struct tee {
	int src, file, fwd;
	int eof;
	size_t off, len; /* data read but not yet forwarded */
	char buf[128 << 10];
} tees[2];

/* hf_guardian_receipt rewrites the receipt in place (the file keeps the identity
 * registered by the launcher), padded with spaces so it never shrinks (and
 * to at least RECEIPT_MIN bytes). The complete receipt is fsynced when no
 * launcher is there to record the result durably (its control channel is
 * closed): a launcher that is alive commits the result to the registry
 * before it returns. */
static int64_t ns_of(const struct timespec *ts) { return (int64_t)ts->tv_sec * 1000000000LL + ts->tv_nsec; }
static int64_t earliest(int64_t a, int64_t b) { return a < b ? a : b; }

static const char *reason_names[HF_R_MAX + 1] = {"", "user", "deadline", "idle", "owner-exit", "timeout", "cancelled",
	"completed", "keeper-lost", "limit", "abandoned"};

/* kv appends "key=value\n" to the receipt being built, the value
 * percent-encoded (fields.go); a field that does not fit is left out. */
static void kv(const char *key, const char *val)
{
	size_t n = strlen(key);
	if (rec_end + n + 3 * strlen(val) + 3 > sizeof rec_buf)
		return;
	memcpy(rec_buf + rec_end, key, n);
	rec_end += n;
	rec_buf[rec_end++] = '=';
	for (const unsigned char *s = (const unsigned char *)val; *s; s++) {
		if (*s <= ' ' || *s == '%' || *s == 0x7f)
			rec_end += (size_t)snprintf(rec_buf + rec_end, 4, "%%%02X", *s);
		else
			rec_buf[rec_end++] = (char)*s;
	}
	rec_buf[rec_end++] = '\n';
}

__attribute__((format(printf, 2, 3))) static void kvf(const char *key, const char *fmt, ...)
{
	char t[32];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(t, sizeof t, fmt, ap);
	va_end(ap);
	kv(key, t);
}

void hf_guardian_receipt(void)
{
	rec_end = 0;
	kv("command_id", cfg.command_id);
	kv("env_id", cfg.env_id);
	kv("boot_id", R.boot_id);
	kvf("guardian_pid", "%d", (int)self_pid);
	kvf("proof_dev", "%llu", (unsigned long long)R.proof.st_dev);
	kvf("proof_ino", "%llu", (unsigned long long)R.proof.st_ino);
	/* Where zero is none the field is always written (0, "" or false);
	 * the others only once they are known. */
	kvf("workload_pid", "%d", (int)leader_pid);
	kvf("workload_start", "%llu", (unsigned long long)R.workload_start);
	kv("start_error", R.start_error);
	if (R.leader_at.tv_sec)
		kvf("leader_exited_at", "%lld", (long long)ns_of(&R.leader_at));
	if (R.code >= 0)
		kvf("exit_code", "%d", (int)R.code);
	if (R.signal)
		kvf("signal", "%d", (int)R.signal);
	kv("stop_reason", reason_names[stop_reason]);
	kv("stopped_by_hostfork", R.after_stop ? "true" : "false");
	kvf("outside_cgroup", "%d", (int)R.outsiders);
	kv("membership_unstable", R.unstable ? "true" : "false");
	kv("output_truncated", hf_output_truncated ? "true" : "false");
	if (leader_oom >= 0)
		kv("leader_oom", leader_oom ? "true" : "false");
	kvf("leader_oom_stale_ms", "%lld", (long long)leader_oom_stale_ms);
	if (hf_sess_last_in.tv_sec)
		kvf("last_input_at", "%lld", (long long)ns_of(&hf_sess_last_in));
	if (hf_sess_last_out.tv_sec)
		kvf("last_output_at", "%lld", (long long)ns_of(&hf_sess_last_out));
	if (R.tree_at.tv_sec)
		kvf("tree_exited_at", "%lld", (long long)ns_of(&R.tree_at));
	kv("complete", R.complete ? "true" : "false");
	/* "end=" and the FNV-1a hash of the text before it. */
	uint32_t h = 2166136261u;
	for (size_t i = 0; i < rec_end; i++)
		h = (h ^ (unsigned char)rec_buf[i]) * 16777619u;
	if (rec_end + 14 <= sizeof rec_buf)
		rec_end += (size_t)snprintf(rec_buf + rec_end, 15, "end=%08x\n", h);
	/* Padding: the text never shrinks, and from the first write on it
	 * rarely grows, so a concurrent reader does not see new text cut at an
	 * old file size (ReadReceipt retries a torn read anyway). */
	size_t pad = rec_len > RECEIPT_MIN ? rec_len : RECEIPT_MIN;
	while (rec_end < pad && rec_end < sizeof rec_buf)
		rec_buf[rec_end++] = ' ';
	rec_len = rec_end;
	/* A regular file takes a write whole or fails (a short write: out of
	 * space). */
	ssize_t w = pwrite(HF_FD_RECEIPT, rec_buf, rec_len, 0);
	if (w != (ssize_t)rec_len)
		hf_log("writing the receipt: %s", w < 0 ? hf_errstr(errno) : "short write");
	else if (R.complete && !ctl_open)
		fsync(HF_FD_RECEIPT);
}

/* emit writes one event line, "ev=KIND" (protocol.go, Event), once the
 * receipt holds what the event announces. A dead launcher gives EPIPE: the
 * receipt is the durable channel. */
static void emit(const char *kind)
{
	char b[32];
	hf_write_all(HF_FD_EVENTS, b, (size_t)snprintf(b, sizeof b, "ev=%s\n", kind));
}

/* ---- the release message ---- */

/* parse_release fills cfg from the message's "key=value" strings. */
static int parse_release(struct hf_msg *m)
{
	/* argv and env, each ended by a NULL, go after the message, where
	 * hf_read_msg left zeroed room: one pointer per 5 bytes of it each
	 * ("env=\0" is the shortest entry). */
	static char *join[HF_MAX_JOIN + 1];
	cfg.argv.v = (char **)(void *)(m->buf + ((m->len + 1 + 15) & ~(size_t)15));
	cfg.envp.v = cfg.argv.v + m->len / 5 + 1;
	cfg.join.v = join;
	static const struct hf_key keys[] = {
		{"command_id", 's', cfg.command_id, sizeof cfg.command_id, 0},
		{"env_id", 's', cfg.env_id, sizeof cfg.env_id, 0},
		{"path", 'p', &cfg.path, 0, 0},
		{"argv", 'v', &cfg.argv, 0, 0},
		{"env", 'v', &cfg.envp, 0, 0},
		{"cwd", 'p', &cfg.cwd, 0, 0},
		{"output", 'f', &cfg.pipe_mode, 0, "pipe"},
		{"output", 'f', &cfg.inherit_mode, 0, "inherit"},
		{"workload_cgroup", 's', tree.cgroup, sizeof tree.cgroup, 0}, /* "": the subreaper tier */
		{"cgroup_mount", 's', tree.mount, sizeof tree.mount, 0},
		{"guardians_cgroup", 's', cfg.guardians, sizeof cfg.guardians, 0},
		{"v1_join", 'v', &cfg.join, HF_MAX_JOIN, 0},
		{"oom_file", 's', cfg.oom_file, sizeof cfg.oom_file, 0},
		{"deadline_file", 's', cfg.deadline_file, sizeof cfg.deadline_file, 0},
		{"boot_id", 's', R.boot_id, sizeof R.boot_id, 0},
		{"deadline_mono_ns", 'i', &cfg.deadline_ns, 0, 0},
		{"timeout_mono_ns", 'i', &cfg.timeout_ns, 0, 0},
		{"grace_ns", 'i', &cfg.grace_ns, 0, 0},
		{"idle_ns", 'i', &cfg.idle_ns, INT64_MAX, 0},
		{"owner_exit", 'f', &cfg.owner_stop, 0, "stop"},
		{"foreground", 'f', &cfg.foreground, 0, "1"},
		{"auto_stop", 'f', &cfg.auto_stop, 0, "1"},
		{"view_pid", 'i', &cfg.view_pid, INT_MAX, 0},
		{"view_start", 'i', &cfg.view_start, INT64_MAX, 0},
		{"view_userns", 'f', &cfg.view_userns, 0, "1"},
		{"session", 'f', &hf_sess_tty, 0, "tty"},
		{"session", 'f', &hf_sess_stdin, 0, "stdin"},
		{"tty_cols", 'i', &hf_sess_cols, 65535, 0},
		{"tty_rows", 'i', &hf_sess_rows, 65535, 0},
		{0, 0, 0, 0, 0},
	};
	if (hf_parse_msg(m, keys, NULL) < 0)
		return -1;
	if (!cfg.path || !cfg.path[0]) {
		hf_log("release: no path");
		return -1;
	}
	return 0;
}

/* ---- starting the workload ---- */

/* The steps of a start, and what a failure of each says (the start's
 * with the executable's path). */
enum { STEP_START = 1, STEP_VIEW = 2, STEP_LIMITS = 3, STEP_CGROUP = 4 };
static const char *const step_names[] = {"", "starting ", "joining the view", "joining the command's limit groups",
	"opening workload cgroup"};

struct child_err {
	int step, err;
};

static void reset_signals(void)
{
	sigset_t none;
	for (int s = 1; s < NSIG; s++)
		signal(s, SIG_DFL); /* EINVAL for SIGKILL, SIGSTOP and reserved ones: fine */
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
}

/* child_exec runs in the new child; it never returns. */
static void child_exec(int in, int out, int err, int nsfd, int report)
{
	struct child_err ce = {STEP_START, 0};
	if (hf_session_child() < 0)
		goto fail;
	/* SIGTTOU is still ignored (inherited from the guardian). */
	if (cfg.foreground && tcsetpgrp(in, getpid()) < 0)
		goto fail;
	/* cgroup v1 has no clone-into: the workload joins its own limit groups
	 * (a child of the environment's, for per-command counters) before it
	 * runs anything. */
	for (size_t i = 0; i < cfg.join.n; i++) {
		if (hf_write_file(cfg.join.v[i], "0") < 0) { /* the group's cgroup.procs */
			ce.step = STEP_LIMITS;
			goto fail;
		}
	}
	/* Never onto themselves: 0, 1 and 2 are the guardian's own. */
	if (dup2(in, 0) < 0 || dup2(out, 1) < 0 || dup2(err, 2) < 0)
		goto fail;
	/* Nothing but 0, 1 and 2 reaches the workload: not the receipt, not
	 * the control or event pipes. Every descriptor the guardian opens is
	 * close-on-exec already, and hf_helper_start marks those it was
	 * handed; this catches what a later change might miss (Linux 5.11;
	 * before it the call fails and changes nothing). */
	syscall(SYS_close_range, 3U, ~0U, HF_CLOSE_RANGE_CLOEXEC);
	/* A rootless view's mount namespace belongs to the keeper's user
	 * namespace, which this user owns: both are joined at once through
	 * the pidfd. The workload is not root in it (its own uid maps to
	 * itself), so exec drops the capabilities joining gave. */
	if (nsfd >= 0 && setns(nsfd, CLONE_NEWNS | (cfg.view_userns ? CLONE_NEWUSER : 0)) < 0) {
		ce.step = STEP_VIEW;
		goto fail;
	}
	if (cfg.cwd && cfg.cwd[0] && chdir(cfg.cwd) < 0)
		goto fail;
	reset_signals();
	if (hf_oom_adj[0]) /* the guardian's own is -1000 (hf_helper_start) */
		hf_write_file("/proc/self/oom_score_adj", hf_oom_adj);
	execve(cfg.path, cfg.argv.v, cfg.envp.v);
fail:
	ce.err = errno;
	(void)!write(report, &ce, sizeof ce);
	_exit(127);
}

/* keeper_pidfd returns a pidfd of the environment's keeper, verified to be
 * the recorded process (its start time), or -1. The workload joins the
 * view through it: setns(pidfd, CLONE_NEWNS), Linux 5.8, leaves no window
 * in which the PID could name another process (if the keeper exits, setns
 * fails). */
static int keeper_pidfd(void)
{
	struct hf_stat st;
	int fd = (int)syscall(SYS_pidfd_open, (pid_t)cfg.view_pid, 0);
	if (fd >= 0 && (hf_read_stat((pid_t)cfg.view_pid, &st) < 0 || (cfg.view_start && st.start != (uint64_t)cfg.view_start))) {
		close(fd);
		fd = -1;
	}
	return fd; /* close-on-exec, as pidfd_open makes it */
}

/* start_workload starts the leader. On failure it returns -1 with the
 * message in msg and the errno in *err. */
static pid_t start_workload(int in, int out, int errfd, char *msg, size_t cap, int *err)
{
	int cgfd = -1, nsfd = -1, p[2];
	pid_t pid = -1;
	struct child_err ce = {STEP_START, 0};
	if (tree.cgroup[0] && (cgfd = open(tree.cgroup, O_PATH | O_DIRECTORY | O_CLOEXEC)) < 0) {
		ce = (struct child_err){STEP_CGROUP, errno};
	} else if (cfg.view_pid > 0 && (nsfd = keeper_pidfd()) < 0) {
		ce.step = 0; /* said here */
		*err = ESRCH;
		snprintf(msg, cap, "joining the view: the environment's keeper (pid %d) is gone", (int)cfg.view_pid);
	} else if (pipe2(p, O_CLOEXEC) < 0) {
		ce.err = errno;
	} else {
		/* clone3 with CLONE_INTO_CGROUP: a member of cgfd's group from
		 * birth. Like a plain fork otherwise, portable to every
		 * architecture (decision 67, retired: the CLONE_VM|CLONE_VFORK
		 * clone in assembly saved page faults on x86-64 only). */
		struct hf_clone_args a = {.flags = cgfd >= 0 ? HF_CLONE_INTO_CGROUP : 0, .exit_signal = SIGCHLD, .cgroup = cgfd >= 0 ? (uint64_t)cgfd : 0};
		pid = (pid_t)syscall(SYS_clone3, &a, sizeof a);
		if (pid == 0)
			child_exec(in, out, errfd, nsfd, p[1]);
		ce.err = errno;
		close(p[1]);
		/* EOF: the exec succeeded (the pipe is close-on-exec). */
		ssize_t n = pid > 0 ? read(p[0], &ce, sizeof ce) : 0;
		close(p[0]);
		if (n == (ssize_t)sizeof ce) {
			waitpid(pid, NULL, 0);
			pid = -1;
		}
	}
	if (pid < 0 && ce.step) {
		*err = ce.err;
		snprintf(msg, cap, "%s%s: %s", step_names[ce.step], ce.step == STEP_START ? cfg.path : "", hf_errstr(ce.err));
	}
	if (cgfd >= 0)
		close(cgfd);
	if (nsfd >= 0)
		close(nsfd);
	return pid;
}

static int start_failed(const char *msg, int code)
{
	snprintf(R.start_error, sizeof R.start_error, "%s", msg);
	R.code = code;
	clock_gettime(CLOCK_REALTIME, &R.leader_at);
	R.tree_at = R.leader_at;
	R.complete = 1;
	hf_guardian_receipt();
	emit("exec-failed");
	return 0;
}

/* ---- the tree ---- */

/* kill_round kills every member (hf_tree_kill); while some remain (a
 * member outside the cgroup may fork between listing and killing, an
 * unkillable one may linger), it is repeated. */
static void kill_round(void)
{
	stop_phase = 2;
	rekill = hf_tree_kill(&tree) > 0;
	if (tree.outsiders > R.outsiders)
		R.outsiders = tree.outsiders;
	R.unstable |= !tree.stable;
	if (rekill) {
		rekill_rounds++;
		rekill_at = hf_mono_now() + (rekill_rounds < 100 ? 5 : 100) * NS_PER_MS;
	}
}

/* stop_tree: SIGTERM to every member, then at kill_at (the grace) the kill
 * step. The first reason wins; the earliest kill time wins. */
static void stop_tree(int reason, int64_t when)
{
	if (!stop_reason && reason)
		stop_reason = reason;
	hf_tree_signal(&tree, SIGTERM);
	kill_at = stop_phase == 0 ? when : earliest(kill_at, when);
	if (stop_phase == 0)
		stop_phase = 1;
	if (stop_phase == 1 && hf_mono_now() >= kill_at)
		kill_round();
}

/* hf_keyed finds the line of buf that starts with key and parses the
 * number after it (base 10 or 16). Only a line's start counts: a
 * process's name, which it chooses, stands in /proc/PID/status too. */
static int hf_keyed(const char *buf, const char *key, int base, uint64_t *out)
{
	size_t n = strlen(key);
	for (const char *l = buf; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
		if (!strncmp(l, key, n)) {
			char *end;
			errno = 0;
			*out = strtoull(l + n, &end, base);
			return end == l + n || errno ? -1 : 0;
		}
	}
	return -1;
}

/* io_total sums the tree's read and write counters (/proc/PID/io rchar +
 * wchar): terminal input and output count as activity in inherit mode. */
static uint64_t io_total(void)
{
	static pid_t m[4096];
	static char b[1024];
	uint64_t sum = 0;
	int n = hf_tree_list(&tree, m, 4096);
	for (int i = 0; i < n && i < 4096; i++) {
		char path[48];
		uint64_t r, w;
		snprintf(path, sizeof path, "/proc/%d/io", (int)m[i]);
		if (hf_read_file(path, b, sizeof b) > 0 && hf_keyed(b, "rchar: ", 10, &r) == 0 && hf_keyed(b, "wchar: ", 10, &w) == 0)
			sum += r + w;
	}
	return sum;
}

static int64_t idle_check_at(void)
{
	if (cfg.idle_ns <= 0 || idle_fired || stop_phase != 0)
		return INT64_MAX;
	int64_t sa = hf_session_activity(hf_mono_now());
	if (sa > last_activity)
		last_activity = sa;
	int64_t step = cfg.idle_ns / 8 > 100 * NS_PER_MS ? cfg.idle_ns / 8 : 100 * NS_PER_MS;
	return earliest(last_activity + cfg.idle_ns, hf_mono_now() + step);
}

/* idle_poll notices output written straight to the artifact files and any
 * reading or writing by the tree. */
static void idle_poll(void)
{
	for (int i = 0; !cfg.pipe_mode && i < 2; i++) {
		struct stat st;
		if (fstat(HF_FD_STDOUT + i, &st) == 0 && (int64_t)st.st_size != idle_sizes[i]) {
			idle_sizes[i] = (int64_t)st.st_size;
			last_activity = hf_mono_now();
		}
	}
	/* In inherit mode output goes straight to the inherited descriptors
	 * (a terminal, most often), which the guardian can't watch: the tree's
	 * own read and write counters stand in for terminal input and output.
	 * Elsewhere only output and signals count (a silent tree busy with
	 * files is idle). */
	if (cfg.inherit_mode) {
		uint64_t io = io_total();
		if (io != idle_io) {
			idle_io = io;
			last_activity = hf_mono_now();
		}
	}
}

/* soft_deadline is when the environment's deadline starts its stop. */
static int64_t soft_deadline(void)
{
	return cfg.deadline_ns > 0 ? cfg.deadline_ns - cfg.grace_ns : INT64_MAX;
}

static void arm_timer(void)
{
	int64_t next = earliest(soft_fired ? INT64_MAX : soft_deadline(), idle_check_at());
	next = earliest(next, cfg.timeout_ns > 0 && !timeout_fired ? cfg.timeout_ns : INT64_MAX);
	next = earliest(next, stop_phase == 1 ? kill_at : INT64_MAX);
	next = earliest(next, rekill ? rekill_at : INT64_MAX);
	next = earliest(next, earliest(backup_at, oom_next));
	if (next != timer_armed && hf_arm_timer(tfd, next) == 0)
		timer_armed = next;
}

static void on_timer(void)
{
	uint64_t ticks;
	(void)!read(tfd, &ticks, sizeof ticks);
	timer_armed = INT64_MAX; /* one-shot: disarmed now */
	int64_t now = hf_mono_now();
	if (!soft_fired && now >= soft_deadline()) {
		soft_fired = 1;
		stop_tree(HF_R_DEADLINE, cfg.deadline_ns);
	}
	if (cfg.timeout_ns > 0 && !timeout_fired && now >= cfg.timeout_ns) {
		timeout_fired = 1; /* its kill never comes after the deadline */
		stop_tree(HF_R_TIMEOUT, earliest(cfg.timeout_ns + cfg.grace_ns, cfg.deadline_ns > 0 ? cfg.deadline_ns : INT64_MAX));
	}
	if (cfg.idle_ns > 0 && !idle_fired && stop_phase == 0) {
		idle_poll();
		if (now >= last_activity + cfg.idle_ns) {
			idle_fired = 1;
			stop_tree(HF_R_IDLE, now + cfg.grace_ns);
		}
	}
	if (stop_phase == 1 && now >= kill_at)
		kill_round();
	if (rekill && now >= rekill_at)
		kill_round();
	if (backup_at != INT64_MAX && now >= backup_at) {
		/* An outside stopper announced a stop and did not finish it
		 * (it may have died): finish it here. */
		backup_at = INT64_MAX;
		if (!no_children)
			kill_round();
	}
}

/* ---- reaping ---- */

/* oom_count reads the oom_kill counter of cfg.oom_file (-1: unknown). */
static int64_t oom_count(void)
{
	static char b[2048];
	uint64_t v;
	if (!cfg.oom_file[0] || hf_read_file(cfg.oom_file, b, sizeof b) <= 0 || hf_keyed(b, "oom_kill ", 10, &v) < 0)
		return -1;
	return (int64_t)v;
}

/* leader_untouched reports whether the leader is, now, neither dying nor
 * dead: no SIGKILL pending (the OOM killer sends it before it counts the
 * kill), not exiting (PF_EXITING), not a zombie. */
static int leader_untouched(void)
{
	static char b[4096];
	char path[48];
	struct hf_stat st;
	uint64_t pnd, shd;
	snprintf(path, sizeof path, "/proc/%d/status", (int)leader_pid);
	if (hf_read_stat(leader_pid, &st) < 0 || strchr("ZXx", st.state) || (st.flags & 0x4) /* PF_EXITING */ ||
	    hf_read_file(path, b, sizeof b) <= 0 || hf_keyed(b, "SigPnd:", 16, &pnd) < 0 || hf_keyed(b, "ShdPnd:", 16, &shd) < 0)
		return 0;
	return !((pnd | shd) & (1ULL << (SIGKILL - 1)));
}

/* oom_sample takes a sample while the leader lives untouched: read first,
 * then checked, so a value kept was read before any kill of the leader. */
static void oom_sample(void)
{
	if (!cfg.oom_file[0] || !leader_alive)
		return;
	int64_t now = hf_mono_now();
	if (now < oom_next && oom_last >= 0)
		return;
	oom_next = now + OOM_SAMPLE;
	int64_t v = oom_count();
	if (v >= 0 && leader_untouched()) {
		oom_last = v;
		oom_last_at = now;
		oom_touched_at = 0; /* a sight before this sample says nothing */
	} else if (v >= 0 && !oom_touched_at) {
		oom_touched_at = now;
	}
}

static void leader_exited(int status)
{
	clock_gettime(CLOCK_REALTIME, &R.leader_at);
	leader_alive = 0;
	hf_session_leader_exited(status);
	oom_next = INT64_MAX;
	R.after_stop = stop_phase > 0 || notified;
	if (WIFSIGNALED(status)) {
		R.signal = WTERMSIG(status);
		if (R.signal == SIGKILL && cfg.oom_file[0]) {
			/* oom_last_at is the workload's start until a sample is
			 * kept; the first sight is never before the last sample. */
			int64_t now = oom_count(), seen = oom_touched_at ? oom_touched_at : hf_mono_now();
			int64_t age = seen > oom_last_at ? seen - oom_last_at : 0;
			if (oom_last >= 0 && now >= 0 && now <= oom_last)
				leader_oom = 0;
			else if (oom_last >= 0 && now >= 0 && age <= OOM_FRESH)
				leader_oom = 1;
			else
				leader_oom_stale_ms = age / NS_PER_MS > 0 ? age / NS_PER_MS : 1;
		}
	} else {
		R.code = WEXITSTATUS(status);
	}
	hf_guardian_receipt();
	emit("leader");
}

/* reap waits for every child that has exited, adopted orphans included;
 * ECHILD means the tree is gone. */
static void reap(void)
{
	for (;;) {
		int st;
		pid_t p = waitpid(-1, &st, WNOHANG);
		if (p == 0)
			return;
		if (p < 0) {
			if (errno == ECHILD)
				no_children = 1;
			else
				hf_log("waitpid: %s", hf_errstr(errno));
			return;
		}
		if (p == leader_pid && leader_alive)
			leader_exited(st);
	}
}

/* on_stop_request handles a SIGTERM. A queued one (SI_QUEUE, from a
 * hostfork stopper) carries its reason and grace; with HF_STOP_NOTICE the
 * sender stops the tree itself, and the guardian only records the reason
 * and arms a backup kill in case the sender dies first. A plain SIGTERM is
 * `hostfork stop` in the subreaper tier, or a systemd manager enforcing the
 * scope's deadline at the same moment as the guardian's own timer: then the
 * reason is the deadline. */
static void on_stop_request(const struct signalfd_siginfo *si)
{
	int64_t now = hf_mono_now();
	if (si->ssi_code == SI_QUEUE) {
		int v = si->ssi_int;
		int reason = v & 0xff;
		int64_t grace = (int64_t)((unsigned)v >> HF_GRACE_SHIFT) * 10 * NS_PER_MS;
		if (reason < 1 || reason > HF_R_MAX)
			reason = HF_R_USER;
		if (v & HF_STOP_NOTICE) {
			if (!stop_reason)
				stop_reason = reason;
			notified = 1;
			backup_at = earliest(backup_at, now + grace + 2000 * NS_PER_MS);
			hf_guardian_receipt();
			return;
		}
		stop_tree(reason, now + grace);
		return;
	}
	if (cfg.deadline_ns > 0 && now >= soft_deadline() - 250 * NS_PER_MS)
		stop_tree(HF_R_DEADLINE, cfg.deadline_ns);
	else
		stop_tree(HF_R_USER, now + cfg.grace_ns);
}

static void on_signals(void)
{
	struct signalfd_siginfo si;
	int chld = 0, moved = 0;
	while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
		if (si.ssi_signo == SIGCHLD)
			chld = 1;
		else if (si.ssi_signo == HF_SIG_DEADLINE)
			moved = 1;
		else if (si.ssi_signo == SIGTERM)
			on_stop_request(&si);
	}
	if (moved)
		hf_read_deadline(AT_FDCWD, cfg.deadline_file, &cfg.deadline_ns);
	if (chld)
		reap();
}

/* ---- control messages after release ---- */

static void ctl_handle(char *line)
{
	int64_t v;
	switch (line[0]) {
	case HF_MSG_SIGNAL:
		last_activity = hf_mono_now();
		if (hf_parse_i64(line + 1, &v) == 0 && v > 0 && v < NSIG && leader_alive)
			kill(leader_pid, (int)v); /* unreaped: the PID is still ours */
		break;
	case HF_MSG_STOP: /* the reason's code (protocol.go, encodeStop) */
		if (hf_parse_i64(line + 1, &v) < 0 || v < 1 || v > HF_R_MAX)
			v = HF_R_USER;
		stop_tree((int)v, hf_mono_now() + cfg.grace_ns);
		break;
	}
}

static void on_control(void)
{
	static struct hf_lines ctl;
	if (hf_read_lines(HF_FD_CONTROL, &ctl, ctl_handle) == 0)
		return;
	/* EOF (or an error): the owner is gone. */
	close(HF_FD_CONTROL);
	ctl_open = 0;
	if (cfg.owner_stop)
		stop_tree(HF_R_OWNER_EXIT, hf_mono_now() + cfg.grace_ns);
}

/* ---- the tee ---- */

static void tee_close_fwd(struct tee *t)
{
	if (t->fwd >= 0)
		close(t->fwd);
	t->fwd = -1;
	t->off = t->len = 0;
}

static void tee_flush(struct tee *t)
{
	while (t->off < t->len) {
		ssize_t w = write(t->fwd, t->buf + t->off, t->len - t->off);
		if (w < 0 && errno == EAGAIN)
			return; /* wait for POLLOUT */
		if (w < 0)
			return tee_close_fwd(t); /* EPIPE: the reader is gone */
		t->off += (size_t)w;
	}
	t->off = t->len = 0;
	if (t->eof)
		tee_close_fwd(t);
}

/* fs_full reports whether fd's filesystem has less than 128 KiB left for
 * this user. */
static int fs_full(int fd)
{
	struct statfs s;
	if (fstatfs(fd, &s) < 0)
		return 0;
	unsigned long long freeb = geteuid() == 0 ? s.f_bfree : s.f_bavail;
	return freeb * (unsigned long long)s.f_bsize < (128ULL << 10);
}

static void tee_read(struct tee *t)
{
	ssize_t n = read(t->src, t->buf, sizeof t->buf);
	if (n < 0 && errno == EAGAIN)
		return;
	if (n > 0) {
		last_activity = hf_mono_now();
		/* The artifact first: it never depends on the reader. After a
		 * failed write (a full store) the file stays the exact prefix it
		 * holds, and the receipt says it is cut; the reader still gets
		 * everything. */
		if (t->file >= 0 && hf_write_all(t->file, t->buf, (size_t)n) < 0) {
			hf_log("writing the output file: %s; it is cut here", hf_errstr(errno));
			hf_output_truncated = 1;
			close(t->file);
			t->file = -1;
		}
		if (t->fwd >= 0) {
			t->off = 0;
			t->len = (size_t)n;
			tee_flush(t);
		}
		return;
	}
	if (n < 0) {
		char m[160];
		int k = snprintf(m, sizeof m, "\n[hostfork: capture error: read: %s]\n", hf_errstr(errno));
		if (t->file >= 0)
			hf_write_all(t->file, m, (size_t)k);
	}
	t->eof = 1;
	close(t->src);
	t->src = -1;
	if (t->file >= 0)
		close(t->file);
	t->file = -1;
	if (t->off >= t->len)
		tee_close_fwd(t);
}

static int tees_done(void)
{
	return !cfg.pipe_mode || (tees[0].eof && tees[0].fwd < 0 && tees[1].eof && tees[1].fwd < 0);
}

/* ---- the end of an environment made by run ---- */

/* finish_environment: the tree of a run's command has exited (auto_stop),
 * so its environment ends: the other commands' guardians are asked to stop
 * their trees (reason "completed") and the keeper holding the view to end.
 * Each is verified through a pidfd first: a guardian must still be in the
 * environment's guardians group, the keeper must still have the recorded
 * start time. The registry is settled by the next reader. */
static void finish_environment(void)
{
	if (cfg.guardians[0])
		hf_stop_guardians(tree.mount, cfg.guardians, self_pid, HF_R_COMPLETED, cfg.grace_ns, NULL);
	int fd = cfg.view_pid > 0 ? keeper_pidfd() : -1;
	if (fd >= 0) {
		hf_queue_stop(fd, HF_R_COMPLETED, 0, cfg.grace_ns);
		close(fd);
	}
}

/* ---- main ---- */

/* open_late_dir: a launcher that made the command's directory after our
 * start passed its parent (HF_FD_PARENT); the directory is the entry named
 * by the command id, opened beneath the parent without following a symlink,
 * and becomes HF_FD_DIR, where guardian.log is made on first use. A
 * directory that can't be opened leaves the diagnostics on stderr. */
static void open_late_dir(void)
{
	if (fcntl(HF_FD_PARENT, F_GETFD) < 0)
		return;
	const char *id = cfg.command_id;
	int fd = -1;
	errno = EINVAL; /* not a single path component */
	if (id[0] && strcmp(id, ".") && strcmp(id, "..") && !strchr(id, '/'))
		fd = openat(HF_FD_PARENT, id, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	if (fd < 0)
		hf_log("guardian: opening the command's directory %.64s: %s", id, hf_errstr(errno));
	else if (fd == HF_FD_DIR || dup3(fd, HF_FD_DIR, O_CLOEXEC) >= 0)
		hf_log_dirfd = HF_FD_DIR;
	if (fd >= 0 && fd != HF_FD_DIR)
		close(fd);
	close(HF_FD_PARENT);
}

/* stop_pending reads the signals queued at the gate (there are no
 * children yet: a SIGCHLD is nothing) and reports a stop request among
 * them. */
static int stop_pending(void)
{
	struct signalfd_siginfo si;
	int stop = 0;
	while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si)
		if (si.ssi_signo == SIGTERM)
			stop = 1;
	return stop;
}

/* gate_wait waits until the release (or EOF) can be read from the
 * control channel; it returns non-zero for a stop request first. */
static int gate_wait(void)
{
	for (;;) {
		struct pollfd p[2] = {{.fd = HF_FD_CONTROL, .events = POLLIN}, {.fd = sfd, .events = POLLIN}};
		if (poll(p, 2, -1) < 0)
			return 0; /* the blocking read decides */
		if ((p[1].revents & POLLIN) && stop_pending())
			return 1;
		if (p[0].revents)
			return 0;
	}
}

int hf_guardian_main(void)
{
	/* First: SIGTERM (a stop request) and SIGCHLD are read from a signalfd;
	 * a SIGTERM that arrives at the gate ends the guardian there, before
	 * anything starts (see the gate below). */
	sigset_t mask;
	hf_helper_start(&mask, 1, HF_FD_PARENT);
	self_pid = getpid(); /* 0, 1 and 2 are open: the launcher's (launch.go) */
	if (fcntl(HF_FD_DIR, F_GETFD) >= 0)
		hf_log_dirfd = HF_FD_DIR;
	/* A subreaper before anything can be orphaned to us. */
	if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0) {
		hf_log("guardian: PR_SET_CHILD_SUBREAPER: %s", hf_errstr(errno));
		return 125;
	}

	/* The gate: nothing runs until the launcher has durably registered our
	 * identity and sends the release. EOF here is an aborted launch. A
	 * stop request (SIGTERM) at the gate, or one that is pending when the
	 * release arrives, ends the guardian before anything starts: the
	 * stopper waits for us, and the empty receipt says that nothing ran
	 * (the receipt is written once before the workload is started). */
	/* Above the protocol's descriptors: a slot the launcher left empty
	 * (HF_FD_PARENT, the forward pipes) is closed or reused later. */
	int s0 = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	sfd = s0 < 0 ? -1 : fcntl(s0, F_DUPFD_CLOEXEC, HF_FD_PARENT + 1);
	if (s0 >= 0)
		close(s0);
	if (sfd < 0) {
		hf_log("guardian: signalfd: %s", hf_errstr(errno));
		return 125;
	}
	if (gate_wait() != 0)
		return 0;
	int r = hf_read_msg(HF_FD_CONTROL, &rel);
	if (r == 0)
		return 0;
	int ok = r > 0 && parse_release(&rel) == 0;
	/* The late directory first, so that a bad message is logged there too
	 * (when it named its command). */
	if (cfg.command_id[0])
		open_late_dir();
	if (!ok) {
		hf_log("guardian: bad release message");
		return 125;
	}
	if (stop_pending())
		return 0;
	hf_read_deadline(AT_FDCWD, cfg.deadline_file, &cfg.deadline_ns);
	tree.roots[0] = self_pid;
	tree.nroots = 1;

	fstat(HF_FD_RECEIPT, &R.proof);
	/* Released: the receipt is never empty from here on (an empty receipt
	 * of a guardian that is gone proves it never started anything). */
	hf_guardian_receipt();

	static char msg[ERRMSG_MAX];
	int wr[2] = {HF_FD_STDOUT, HF_FD_STDERR}; /* the workload's stdout and stderr */
	/* Tee: the workload writes into pipes that the guardian copies to the
	 * artifact files and forwards to the launcher. Losing the launcher
	 * loses only the forward copy, never the artifact. */
	for (int i = 0; cfg.pipe_mode && i < 2; i++) {
		struct tee *t = &tees[i];
		int p[2];
		if (pipe2(p, O_CLOEXEC) < 0) {
			snprintf(msg, sizeof msg, "creating output pipes: %s", hf_errstr(errno));
			return start_failed(msg, 125);
		}
		t->src = p[0];
		wr[i] = p[1];
		t->file = HF_FD_STDOUT + i; /* and HF_FD_STDERR */
		t->fwd = HF_FD_FWDOUT + i;  /* and HF_FD_FWDERR */
		/* Larger pipes: fewer wakeups per byte on the hot path. Best
		 * effort (capped by /proc/sys/fs/pipe-max-size). O_NONBLOCK is
		 * the only status flag a pipe takes. */
		fcntl(t->src, F_SETPIPE_SZ, 1 << 20);
		fcntl(t->src, F_SETFL, O_NONBLOCK);
		if (fcntl(t->fwd, F_SETFL, O_NONBLOCK) < 0)
			t->fwd = -1;
	}
	tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (tfd < 0) {
		snprintf(msg, sizeof msg, "creating timerfd: %s", hf_errstr(errno));
		return start_failed(msg, 125);
	}
	int serr = 0, in = HF_FD_STDIN;
	if (hf_session_setup(&in, &wr[0], &wr[1], msg, sizeof msg) < 0)
		return start_failed(msg, 125);
	pid_t pid = start_workload(in, wr[0], wr[1], msg, sizeof msg, &serr);
	hf_free_msg(&rel); /* cfg.path, cwd, argv and envp pointed into it */
	/* The workload holds its ends now (the session's pty or stdin pipe). */
	close(HF_FD_STDIN);
	if (in != HF_FD_STDIN)
		close(in);
	if (cfg.pipe_mode) {
		close(wr[0]);
		close(wr[1]);
	}
	if (pid < 0) /* the shell's codes: 127 not found, 126 not runnable */
		return start_failed(msg, serr == ENOENT ? 127 : serr == EACCES || serr == ENOEXEC || serr == EISDIR ? 126 : 125);
	if (!cfg.pipe_mode && cfg.idle_ns <= 0) {
		close(HF_FD_STDOUT);
		close(HF_FD_STDERR);
	} /* else: the tee's, or kept (close-on-exec) to watch the artifacts grow */
	leader_pid = pid;
	leader_alive = 1;
	if (cfg.idle_ns > 0)
		idle_poll(); /* the baselines: the artifacts' sizes, the tree's I/O */
	oom_last_at = last_activity = hf_mono_now();
	struct hf_stat wst;
	if (hf_read_stat(pid, &wst) == 0)
		R.workload_start = wst.start;
	hf_guardian_receipt();
	emit("started");

	for (;;) {
		if (no_children && tees_done())
			break;
		oom_sample();
		arm_timer();
		/* Fixed slots, -1 when unused: signals, timer, control, the two
		 * tees (the forward pipe while data waits for it, else the
		 * source), then the session's. */
		struct pollfd pfd[5 + HF_SESS_MAXC + 3] = {{sfd, POLLIN, 0}, {tfd, POLLIN, 0}, {ctl_open ? HF_FD_CONTROL : -1, POLLIN, 0}};
		for (int i = 0; i < 2; i++) {
			struct tee *t = &tees[i];
			int held = t->off < t->len && t->fwd >= 0;
			pfd[3 + i] = (struct pollfd){!cfg.pipe_mode ? -1 : held ? t->fwd : t->eof ? -1 : t->src, held ? POLLOUT : POLLIN, 0};
		}
		int np = 5 + hf_session_pollfds(pfd + 5, HF_SESS_MAXC + 3);
		if (poll(pfd, (nfds_t)np, hf_session_poll_ms()) < 0) {
			hf_log("guardian: poll: %s", hf_errstr(errno));
			continue;
		}
		if (pfd[0].revents)
			on_signals();
		if (pfd[1].revents)
			on_timer();
		if (pfd[2].revents)
			on_control();
		for (int i = 0; i < 2; i++) {
			if (pfd[3 + i].revents)
				(pfd[3 + i].events == POLLOUT ? tee_flush : tee_read)(&tees[i]);
		}
		hf_session_events(pfd + 5, np - 5);
	}
	hf_session_end();
	clock_gettime(CLOCK_REALTIME, &R.tree_at);
	/* Files mode: the artifacts are beside the receipt. */
	if (!cfg.pipe_mode && !cfg.inherit_mode && fs_full(HF_FD_RECEIPT))
		hf_output_truncated = 1;
	R.complete = 1;
	hf_guardian_receipt();
	emit("tree");
	if (cfg.auto_stop)
		finish_environment();
	return 0;
}
