/*
 * The guardian: one small supervisor per command (DESIGN.md, "Linux
 * execution: who owns what"). It is a hidden mode of every binary that links
 * package supervise: hf_guardian_ctor runs as an ELF constructor, before the
 * Go runtime starts (glibc passes argc, argv and envp to constructors, as
 * runc's nsexec relies on). When argv[1] is HF_GUARDIAN_MODE it runs the
 * whole guardian in C and calls _exit(); the Go runtime never starts, which
 * keeps the guardian's start-up cheap (few page faults) and its anonymous
 * memory small. Otherwise it returns at once.
 *
 * The guardian is single-threaded: one poll loop over a signalfd (SIGCHLD,
 * SIGTERM), a timerfd (deadline and stop grace), the control pipe and, in
 * pipe mode, the tee pipes. It uses no heap: static buffers, plus one
 * anonymous mapping for the release message that is unmapped once the
 * workload runs. The wire format is documented in protocol.go.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "guardian.h"

#ifndef SYS_pidfd_send_signal
#define SYS_pidfd_send_signal 424
#endif
#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_clone3
#define SYS_clone3 435
#endif
#ifndef SYS_close_range
#define SYS_close_range 436
#endif
#define HF_CLONE_INTO_CGROUP 0x200000000ULL
#define HF_CLOSE_RANGE_CLOEXEC (1U << 2)

/* struct clone_args of <linux/sched.h> (CLONE_ARGS_SIZE_VER2). */
struct hf_clone_args {
	uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack,
	    stack_size, tls, set_tid, set_tid_size, cgroup;
};

const char *hf_guardian_mode(void) { return HF_GUARDIAN_MODE; }

#define NS_PER_MS 1000000LL
#define ERRMSG_MAX 2048

/* ---- configuration (from the release message) ---- */

static struct {
	char command_id[HF_MAX_ID + 1];
	char env_id[HF_MAX_ID + 1];
	char cgroup[HF_MAX_PATH + 1]; /* workload cgroup; "" = subreaper tier */
	const char *path, *cwd;       /* valid until the release is unmapped */
	char **argv, **envp;
	int pipe_mode, owner_stop, foreground, view_pid;
	int64_t deadline_ns, grace_ns, idle_ns;
} cfg;

/* Idle timeout: the last observed activity (output, forwarded signals),
 * counted from the workload's start; in files mode output is seen as the
 * artifact files growing, checked every idle/8 (at least 100 ms). */
static int64_t last_activity, idle_sizes[2];
static int idle_fired;

static char *rel_buf;     /* the release mapping */
static size_t rel_map;    /* its size */
static char ctl_early[4096]; /* control bytes that followed the release */
static size_t ctl_early_len;

/* ---- state ---- */

static pid_t self_pid, leader_pid;
static int leader_alive, no_children;
static char stop_reason[HF_MAX_REASON + 1]; /* first stop reason */
static int stop_phase;                      /* 0 none, 1 SIGTERM sent, 2 killed */
static int64_t kill_at, rekill_at, timer_armed = INT64_MAX;
static int rekill, rekill_rounds, soft_fired;
static int sfd = -1, tfd = -1, ctl_open = 1;

/* The receipt (protocol.go, Receipt). */
static struct {
	char boot_id[64];
	uint64_t dev, ino, workload_start;
	char start_error[ERRMSG_MAX];
	int has_leader, has_code, code, has_signal, signal, has_tree, complete;
	struct timespec leader_at, tree_at;
	const char *stop_reason;
} R;
static size_t rec_len; /* length of the last receipt written */
#define RECEIPT_MIN 512

/* Pipe mode: the workload writes into src; the guardian copies to the
 * artifact file and, while it accepts data, to the forward pipe. */
static struct tee {
	int src, file, fwd;
	int eof;
	size_t off, len; /* data read but not yet forwarded */
	char buf[128 << 10];
} tees[2];

/* ---- small helpers ---- */

static int64_t mono_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return;
		}
		p += w;
		n -= (size_t)w;
	}
}

static void glog(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void glog(const char *fmt, ...)
{
	static char b[1024];
	int n = snprintf(b, sizeof b, "hostfork guardian: ");
	va_list ap;
	va_start(ap, fmt);
	n += vsnprintf(b + n, sizeof b - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof b - 2)
		n = (int)sizeof b - 2;
	b[n++] = '\n';
	write_all(2, b, (size_t)n);
}

/* errstr is Go's rendering of an errno: strerror with a lower-case first
 * letter ("no such file or directory"). */
static const char *errstr(int err)
{
	static char b[128];
	snprintf(b, sizeof b, "%s", strerror(err));
	if (b[0] >= 'A' && b[0] <= 'Z' && !(b[1] >= 'A' && b[1] <= 'Z'))
		b[0] = (char)(b[0] - 'A' + 'a');
	return b;
}

static int read_file(const char *path, char *buf, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t len = 0;
	while (len < cap - 1) {
		ssize_t n = read(fd, buf + len, cap - 1 - len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			close(fd);
			return -1;
		}
		if (n == 0)
			break;
		len += (size_t)n;
	}
	close(fd);
	buf[len] = 0;
	return (int)len;
}

static int parse_i64(const char *s, int64_t *out)
{
	int neg = 0;
	uint64_t v = 0;
	if (*s == '-') {
		neg = 1;
		s++;
	}
	if (!*s)
		return -1;
	for (; *s; s++) {
		if (*s < '0' || *s > '9' || v > (uint64_t)INT64_MAX / 10)
			return -1;
		v = v * 10 + (uint64_t)(*s - '0');
		if (v > (uint64_t)INT64_MAX)
			return -1;
	}
	*out = neg ? -(int64_t)v : (int64_t)v;
	return 0;
}

/* read_stat parses /proc/PID/stat; fields are counted from the last ')',
 * since the command name may contain spaces and parentheses. */
static int read_stat(pid_t pid, char *state, pid_t *ppid, uint64_t *start)
{
	static char b[2048];
	char path[48];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	int n = read_file(path, b, sizeof b);
	if (n <= 0)
		return -1;
	char *p = memrchr(b, ')', (size_t)n);
	if (!p || p + 2 >= b + n)
		return -1;
	p += 2;
	/* p is field 3 (state); ppid is field 4, starttime field 22. */
	for (int field = 3; field <= 22; field++) {
		char *end = p;
		while (*end && *end != ' ')
			end++;
		if (end == p)
			return -1;
		if (field == 3 && state)
			*state = *p;
		if (field == 4 && ppid) {
			char c = *end;
			*end = 0;
			int64_t v;
			if (parse_i64(p, &v) < 0)
				return -1;
			*ppid = (pid_t)v;
			*end = c;
		}
		if (field == 22) {
			char c = *end;
			*end = 0;
			int64_t v;
			if (parse_i64(p, &v) < 0)
				return -1;
			*end = c;
			if (start)
				*start = (uint64_t)v;
			return 0;
		}
		if (!*end)
			return -1;
		p = end + 1;
	}
	return -1;
}

/* ---- JSON output ---- */

struct sb {
	char *p;
	size_t len, cap;
};

static void sb_raw(struct sb *b, const char *s, size_t n)
{
	if (n > b->cap - b->len)
		n = b->cap - b->len;
	memcpy(b->p + b->len, s, n);
	b->len += n;
}

static void sb_s(struct sb *b, const char *s) { sb_raw(b, s, strlen(s)); }

static void sb_u64(struct sb *b, uint64_t v)
{
	char t[24];
	int i = sizeof t;
	do {
		t[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	sb_raw(b, t + i, sizeof t - (size_t)i);
}

static void sb_i64(struct sb *b, int64_t v)
{
	if (v < 0) {
		sb_raw(b, "-", 1);
		sb_u64(b, (uint64_t)0 - (uint64_t)v);
	} else {
		sb_u64(b, (uint64_t)v);
	}
}

/* sb_str writes s as a JSON string, with at most max bytes of escaped
 * content. Invalid UTF-8 passes through; Go's decoder turns it into
 * U+FFFD. */
static void sb_str(struct sb *b, const char *s, size_t max)
{
	static const char hex[] = "0123456789abcdef";
	size_t used = 0;
	sb_raw(b, "\"", 1);
	for (; *s; s++) {
		unsigned char c = (unsigned char)*s;
		char e[6];
		size_t n = 0;
		if (c == '"' || c == '\\') {
			e[n++] = '\\';
			e[n++] = (char)c;
		} else if (c == '\n') {
			e[n++] = '\\';
			e[n++] = 'n';
		} else if (c == '\t') {
			e[n++] = '\\';
			e[n++] = 't';
		} else if (c < 0x20 || c == 0x7f) {
			memcpy(e, "\\u00", 4);
			e[4] = hex[c >> 4];
			e[5] = hex[c & 15];
			n = 6;
		} else {
			e[n++] = (char)c;
		}
		if (used + n > max)
			break;
		sb_raw(b, e, n);
		used += n;
	}
	sb_raw(b, "\"", 1);
}

/* sb_time writes ts as Go's time.RFC3339Nano in UTC, quoted. */
static void sb_time(struct sb *b, const struct timespec *ts)
{
	int64_t s = ts->tv_sec, days = s / 86400, rem = s % 86400;
	if (rem < 0) {
		rem += 86400;
		days--;
	}
	/* Civil date from days since 1970-01-01 (H. Hinnant's algorithm). */
	int64_t z = days + 719468;
	int64_t era = (z >= 0 ? z : z - 146096) / 146097;
	int64_t doe = z - era * 146097;
	int64_t yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
	int64_t y = yoe + era * 400;
	int64_t doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
	int64_t mp = (5 * doy + 2) / 153;
	int64_t d = doy - (153 * mp + 2) / 5 + 1;
	int64_t m = mp < 10 ? mp + 3 : mp - 9;
	if (m <= 2)
		y++;
	char t[64];
	int n = snprintf(t, sizeof t, "\"%04lld-%02lld-%02lldT%02lld:%02lld:%02lld",
	    (long long)y, (long long)m, (long long)d, (long long)(rem / 3600),
	    (long long)(rem / 60 % 60), (long long)(rem % 60));
	if (ts->tv_nsec > 0) {
		n += snprintf(t + n, sizeof t - (size_t)n, ".%09ld", (long)ts->tv_nsec);
		while (t[n - 1] == '0')
			n--;
	}
	t[n++] = 'Z';
	t[n++] = '"';
	sb_raw(b, t, (size_t)n);
}

static char rec_buf[16 << 10];

/* write_receipt rewrites the receipt in place (the file keeps the identity
 * registered by the launcher), padded with spaces so it never shrinks (and
 * to at least RECEIPT_MIN bytes). It is fsynced when it becomes complete. */
static void write_receipt(void)
{
	struct sb b = {rec_buf, 0, sizeof rec_buf - 1};
	sb_s(&b, "{\"command_id\":");
	sb_str(&b, cfg.command_id, 1600);
	sb_s(&b, ",\"env_id\":");
	sb_str(&b, cfg.env_id, 1600);
	sb_s(&b, ",\"boot_id\":");
	sb_str(&b, R.boot_id, 128);
	sb_s(&b, ",\"guardian_pid\":");
	sb_i64(&b, self_pid);
	sb_s(&b, ",\"proof_dev\":");
	sb_u64(&b, R.dev);
	sb_s(&b, ",\"proof_ino\":");
	sb_u64(&b, R.ino);
	if (leader_pid > 0) {
		sb_s(&b, ",\"workload_pid\":");
		sb_i64(&b, leader_pid);
	}
	if (R.workload_start) {
		sb_s(&b, ",\"workload_start\":");
		sb_u64(&b, R.workload_start);
	}
	if (R.start_error[0]) {
		sb_s(&b, ",\"start_error\":");
		sb_str(&b, R.start_error, 4096);
	}
	if (R.has_leader) {
		sb_s(&b, ",\"leader_exited_at\":");
		sb_time(&b, &R.leader_at);
	}
	if (R.has_code) {
		sb_s(&b, ",\"exit_code\":");
		sb_i64(&b, R.code);
	}
	if (R.has_signal) {
		sb_s(&b, ",\"signal\":");
		sb_i64(&b, R.signal);
	}
	if (R.stop_reason && R.stop_reason[0]) {
		sb_s(&b, ",\"stop_reason\":");
		sb_str(&b, R.stop_reason, 1600);
	}
	if (R.has_tree) {
		sb_s(&b, ",\"tree_exited_at\":");
		sb_time(&b, &R.tree_at);
	}
	sb_s(&b, R.complete ? ",\"complete\":true}\n" : ",\"complete\":false}\n");
	/* Padding: the text never shrinks, and from the first write on it
	 * rarely grows, so a concurrent reader does not see new text cut at an
	 * old file size (ReadReceipt retries a torn read anyway). */
	size_t pad = rec_len > RECEIPT_MIN ? rec_len : RECEIPT_MIN;
	while (b.len < pad && b.len < b.cap)
		b.p[b.len++] = ' ';
	rec_len = b.len;
	size_t off = 0;
	while (off < b.len) {
		ssize_t w = pwrite(HF_FD_RECEIPT, b.p + off, b.len - off, (off_t)off);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			glog("writing the receipt: %s", errstr(errno));
			return;
		}
		off += (size_t)w;
	}
	if (R.complete) {
		while (fsync(HF_FD_RECEIPT) < 0 && errno == EINTR)
			;
	}
}

/* emit writes one event line (protocol.go, Event). A dead launcher gives
 * EPIPE: the receipt is the durable channel. */
static void emit(const char *kind, pid_t pid, uint64_t start, const int *code,
    const int *sig, const char *reason, const char *error)
{
	static char buf[8192];
	struct timespec now;
	clock_gettime(CLOCK_REALTIME, &now);
	struct sb b = {buf, 0, sizeof buf};
	sb_s(&b, "{\"ev\":");
	sb_str(&b, kind, 64);
	if (pid > 0) {
		sb_s(&b, ",\"pid\":");
		sb_i64(&b, pid);
	}
	if (start) {
		sb_s(&b, ",\"start\":");
		sb_u64(&b, start);
	}
	if (code) {
		sb_s(&b, ",\"code\":");
		sb_i64(&b, *code);
	}
	if (sig) {
		sb_s(&b, ",\"signal\":");
		sb_i64(&b, *sig);
	}
	if (reason && reason[0]) {
		sb_s(&b, ",\"reason\":");
		sb_str(&b, reason, 1600);
	}
	if (error && error[0]) {
		sb_s(&b, ",\"error\":");
		sb_str(&b, error, 4096);
	}
	sb_s(&b, ",\"at\":");
	sb_time(&b, &now);
	sb_s(&b, "}\n");
	write_all(HF_FD_EVENTS, b.p, b.len);
}

/* ---- the gate and the release message ---- */

static int copy_bounded(char *dst, size_t cap, const char *src)
{
	size_t n = strlen(src);
	if (n >= cap)
		return -1;
	memcpy(dst, src, n + 1);
	return 0;
}

/* parse_release fills cfg from the strings in buf[1..end), each
 * "key=value\0". The argv and envp arrays go to the mapping after end. */
static int parse_release(char *buf, size_t end)
{
	size_t nargv = 0, nenv = 0;
	for (char *p = buf + 1; *p; p += strlen(p) + 1) {
		if (!strncmp(p, "argv=", 5))
			nargv++;
		else if (!strncmp(p, "env=", 4))
			nenv++;
	}
	size_t at = (end + 1 + 15) & ~(size_t)15;
	size_t need = (nargv + 1 + nenv + 1) * sizeof(char *);
	if (at + need > rel_map)
		return -1;
	cfg.argv = (char **)(void *)(buf + at);
	cfg.envp = cfg.argv + nargv + 1;
	size_t ia = 0, ie = 0;
	char *next;
	for (char *p = buf + 1; *p; p = next) {
		next = p + strlen(p) + 1;
		char *v = strchr(p, '=');
		if (!v) {
			glog("release: malformed entry");
			return -1;
		}
		*v++ = 0;
		int64_t n;
		if (!strcmp(p, "argv")) {
			cfg.argv[ia++] = v;
		} else if (!strcmp(p, "env")) {
			cfg.envp[ie++] = v;
		} else if (!strcmp(p, "command_id")) {
			if (copy_bounded(cfg.command_id, sizeof cfg.command_id, v) < 0)
				return -1;
		} else if (!strcmp(p, "env_id")) {
			if (copy_bounded(cfg.env_id, sizeof cfg.env_id, v) < 0)
				return -1;
		} else if (!strcmp(p, "path")) {
			cfg.path = v;
		} else if (!strcmp(p, "cwd")) {
			cfg.cwd = v;
		} else if (!strcmp(p, "output")) {
			cfg.pipe_mode = !strcmp(v, "pipe");
		} else if (!strcmp(p, "workload_cgroup")) {
			if (copy_bounded(cfg.cgroup, sizeof cfg.cgroup, v) < 0)
				return -1;
		} else if (!strcmp(p, "deadline_mono_ns")) {
			if (parse_i64(v, &cfg.deadline_ns) < 0)
				return -1;
		} else if (!strcmp(p, "grace_ns")) {
			if (parse_i64(v, &cfg.grace_ns) < 0)
				return -1;
		} else if (!strcmp(p, "idle_ns")) {
			if (parse_i64(v, &cfg.idle_ns) < 0 || cfg.idle_ns < 0)
				return -1;
		} else if (!strcmp(p, "owner_exit")) {
			cfg.owner_stop = !strcmp(v, "stop");
		} else if (!strcmp(p, "foreground")) {
			cfg.foreground = !strcmp(v, "1");
		} else if (!strcmp(p, "view_pid")) {
			if (parse_i64(v, &n) < 0 || n < 0 || n > INT_MAX)
				return -1;
			cfg.view_pid = (int)n;
		} else {
			glog("release: unknown key %.64s", p);
			return -1;
		}
	}
	cfg.argv[ia] = NULL;
	cfg.envp[ie] = NULL;
	if (!cfg.path || !cfg.path[0]) {
		glog("release: no path");
		return -1;
	}
	return 0;
}

/* read_release blocks at the gate. It returns 1 when released, 0 when the
 * control pipe closed first (an aborted launch), -1 on a bad message. */
static int read_release(void)
{
	/* Room for the message plus its argv/envp pointer arrays (at most one
	 * 8-byte pointer per 5 bytes of message). Only touched pages count. */
	rel_map = (size_t)HF_MAX_RELEASE * 3;
	rel_buf = mmap(NULL, rel_map, PROT_READ | PROT_WRITE,
	    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (rel_buf == MAP_FAILED) {
		glog("mapping the release buffer: %s", errstr(errno));
		rel_buf = NULL;
		return -1;
	}
	size_t len = 0, scan = 1, cur = 1;
	for (;;) {
		if (len >= (size_t)HF_MAX_RELEASE) {
			glog("release message too large");
			return -1;
		}
		ssize_t n = read(HF_FD_CONTROL, rel_buf + len, (size_t)HF_MAX_RELEASE - len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return 0;
		}
		if (n == 0)
			return 0;
		len += (size_t)n;
		if (rel_buf[0] != HF_MSG_RELEASE) {
			glog("bad release message");
			return -1;
		}
		for (; scan < len; scan++) {
			if (rel_buf[scan])
				continue;
			if (scan == cur) {
				/* The empty string: the end of the message. */
				size_t extra = len - scan - 1;
				if (extra > sizeof ctl_early)
					extra = sizeof ctl_early;
				memcpy(ctl_early, rel_buf + scan + 1, extra);
				ctl_early_len = extra;
				rel_buf[scan] = 0;
				return parse_release(rel_buf, scan) < 0 ? -1 : 1;
			}
			cur = scan + 1;
		}
	}
}

static void release_done(void)
{
	if (rel_buf)
		munmap(rel_buf, rel_map);
	rel_buf = NULL;
	cfg.path = cfg.cwd = NULL;
	cfg.argv = cfg.envp = NULL;
}

/* ---- starting the workload ---- */

enum { STEP_START = 1, STEP_VIEW = 2 };

struct child_err {
	int step, err;
};

static void reset_signals(void)
{
	struct sigaction sa;
	memset(&sa, 0, sizeof sa);
	sa.sa_handler = SIG_DFL;
	for (int s = 1; s < NSIG; s++) {
		if (s != SIGKILL && s != SIGSTOP)
			sigaction(s, &sa, NULL); /* EINVAL for reserved ones: fine */
	}
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
}

static int dup_onto(int from, int to)
{
	if (from == to)
		return fcntl(to, F_SETFD, 0);
	for (;;) {
		if (dup2(from, to) >= 0)
			return 0;
		if (errno != EINTR && errno != EBUSY)
			return -1;
	}
}

/* child_exec runs in the new child; it never returns. */
static void child_exec(int in, int out, int err, int nsfd, int report)
{
	struct child_err ce = {STEP_START, 0};
	if (setpgid(0, 0) < 0)
		goto fail;
	/* SIGTTOU is still ignored (inherited from the guardian). */
	if (cfg.foreground && tcsetpgrp(in, getpid()) < 0)
		goto fail;
	if (dup_onto(in, 0) < 0 || dup_onto(out, 1) < 0 || dup_onto(err, 2) < 0)
		goto fail;
	/* Nothing but 0, 1 and 2 reaches the workload: not the receipt, not
	 * the control or event pipes. */
	syscall(SYS_close_range, 3U, ~0U, HF_CLOSE_RANGE_CLOEXEC);
	if (nsfd >= 0 && setns(nsfd, CLONE_NEWNS) < 0) {
		ce.step = STEP_VIEW;
		goto fail;
	}
	if (cfg.cwd && cfg.cwd[0] && chdir(cfg.cwd) < 0)
		goto fail;
	reset_signals();
	execve(cfg.path, cfg.argv, cfg.envp);
fail:
	ce.err = errno;
	while (write(report, &ce, sizeof ce) < 0 && errno == EINTR)
		;
	_exit(127);
}

/* start_workload starts the leader. On failure it returns -1 with the
 * message in msg and the errno in *err. */
static pid_t start_workload(int in, int out, int errfd, char *msg, size_t cap, int *err)
{
	int cgfd = -1, nsfd = -1, p[2];
	pid_t pid = -1;
	char path[64];
	if (cfg.cgroup[0]) {
		cgfd = open(cfg.cgroup, O_PATH | O_DIRECTORY | O_CLOEXEC);
		if (cgfd < 0) {
			*err = errno;
			snprintf(msg, cap, "opening workload cgroup: %s", errstr(*err));
			return -1;
		}
	}
	if (cfg.view_pid > 0) {
		snprintf(path, sizeof path, "/proc/%d/ns/mnt", cfg.view_pid);
		nsfd = open(path, O_RDONLY | O_CLOEXEC);
		if (nsfd < 0) {
			*err = errno;
			snprintf(msg, cap, "opening the view's mount namespace: %s", errstr(*err));
			goto out;
		}
	}
	if (pipe2(p, O_CLOEXEC) < 0) {
		*err = errno;
		snprintf(msg, cap, "starting %s: %s", cfg.path, errstr(*err));
		goto out;
	}
	if (cgfd >= 0) {
		struct hf_clone_args a;
		memset(&a, 0, sizeof a);
		a.flags = HF_CLONE_INTO_CGROUP;
		a.exit_signal = SIGCHLD;
		a.cgroup = (uint64_t)cgfd;
		pid = (pid_t)syscall(SYS_clone3, &a, sizeof a);
	} else {
		pid = fork();
	}
	if (pid == 0)
		child_exec(in, out, errfd, nsfd, p[1]);
	close(p[1]);
	if (pid < 0) {
		*err = errno;
		snprintf(msg, cap, "starting %s: %s", cfg.path, errstr(*err));
		close(p[0]);
		goto out;
	}
	/* EOF: the exec succeeded (the pipe is close-on-exec). */
	struct child_err ce;
	ssize_t n;
	while ((n = read(p[0], &ce, sizeof ce)) < 0 && errno == EINTR)
		;
	close(p[0]);
	if (n == (ssize_t)sizeof ce) {
		while (waitpid(pid, NULL, 0) < 0 && errno == EINTR)
			;
		*err = ce.err;
		if (ce.step == STEP_VIEW)
			snprintf(msg, cap, "joining the view: %s", errstr(ce.err));
		else
			snprintf(msg, cap, "starting %s: %s", cfg.path, errstr(ce.err));
		pid = -1;
	}
out:
	if (cgfd >= 0)
		close(cgfd);
	if (nsfd >= 0)
		close(nsfd);
	return pid;
}

static int start_failed(const char *msg, int code)
{
	snprintf(R.start_error, sizeof R.start_error, "%s", msg);
	R.has_code = 1;
	R.code = code;
	clock_gettime(CLOCK_REALTIME, &R.leader_at);
	R.tree_at = R.leader_at;
	R.has_leader = R.has_tree = 1;
	R.complete = 1;
	write_receipt();
	emit("exec-failed", 0, 0, &code, NULL, NULL, R.start_error);
	return 0;
}

/* ---- the tree ---- */

/* still_member re-checks, after pidfd_open, that pid belongs to the tree,
 * so a PID reused after exit is never signalled. */
static int in_workload_cgroup(pid_t pid)
{
	static char b[8192];
	char path[48];
	snprintf(path, sizeof path, "/proc/%d/cgroup", (int)pid);
	int n = read_file(path, b, sizeof b);
	if (n <= 0)
		return 0;
	for (char *line = b; line && *line;) {
		char *nl = strchr(line, '\n');
		if (nl)
			*nl = 0;
		if (!strncmp(line, "0::", 3)) {
			char *rel = line + 3;
			size_t lr = strlen(rel);
			while (lr > 0 && (rel[lr - 1] == ' ' || rel[lr - 1] == '\t' || rel[lr - 1] == '\r'))
				rel[--lr] = 0;
			while (*rel == ' ' || *rel == '\t') {
				rel++;
				lr--;
			}
			size_t lc = strlen(cfg.cgroup);
			return lr <= lc && !memcmp(cfg.cgroup + lc - lr, rel, lr);
		}
		line = nl ? nl + 1 : NULL;
	}
	return 0;
}

static int is_descendant(pid_t pid)
{
	for (int n = 0; n < 4096 && pid > 1; n++) {
		pid_t pp;
		if (read_stat(pid, NULL, &pp, NULL) < 0)
			return 0;
		if (pp == self_pid)
			return 1;
		pid = pp;
	}
	return 0;
}

static void signal_pid(pid_t pid, int sig)
{
	int fd = (int)syscall(SYS_pidfd_open, pid, 0);
	if (fd < 0)
		return;
	if (cfg.cgroup[0] ? in_workload_cgroup(pid) : is_descendant(pid))
		syscall(SYS_pidfd_send_signal, fd, sig, NULL, 0);
	close(fd);
}

/* The subreaper tier lists the guardian's descendants by walking /proc:
 * (pid, ppid) of every live process, in /proc's ascending order. */
#define MAX_PROCS 65536
static int32_t pr_pid[MAX_PROCS], pr_ppid[MAX_PROCS];
static uint8_t pr_memo[MAX_PROCS]; /* 1 descendant, 2 not */
static int pr_n;

static void list_procs(void)
{
	static char dents[16384];
	pr_n = 0;
	int fd = open("/proc", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0)
		return;
	for (;;) {
		long n = syscall(SYS_getdents64, fd, dents, sizeof dents);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		for (long off = 0; off < n;) {
			/* struct linux_dirent64: ino, off, reclen, type, name */
			unsigned short reclen;
			memcpy(&reclen, dents + off + 16, sizeof reclen);
			const char *name = dents + off + 19;
			off += reclen;
			int64_t v;
			if (name[0] < '1' || name[0] > '9' || parse_i64(name, &v) < 0)
				continue;
			char st;
			pid_t pp;
			if (read_stat((pid_t)v, &st, &pp, NULL) < 0 || st == 'Z')
				continue;
			if (pr_n == MAX_PROCS)
				break;
			pr_pid[pr_n] = (int32_t)v;
			pr_ppid[pr_n] = pp;
			pr_memo[pr_n] = 0;
			pr_n++;
		}
	}
	close(fd);
	/* Keep the table sorted for lookups (it already is, in practice). */
	for (int i = 1; i < pr_n; i++) {
		for (int j = i; j > 0 && pr_pid[j - 1] > pr_pid[j]; j--) {
			int32_t t = pr_pid[j];
			pr_pid[j] = pr_pid[j - 1];
			pr_pid[j - 1] = t;
			t = pr_ppid[j];
			pr_ppid[j] = pr_ppid[j - 1];
			pr_ppid[j - 1] = t;
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

static int proc_is_descendant(int i)
{
	int32_t p = pr_ppid[i];
	for (int n = 0; p > 1 && n < 4096; n++) {
		if (p == self_pid)
			return 1;
		int k = proc_index(p);
		if (k < 0)
			return 0;
		if (pr_memo[k])
			return pr_memo[k] == 1;
		p = pr_ppid[k];
	}
	return 0;
}

/* signal_tree signals every member through a pidfd and returns how many
 * members it found. */
static int signal_tree(int sig)
{
	int found = 0;
	if (cfg.cgroup[0]) {
		static char b[4096];
		char path[HF_MAX_PATH + 32];
		snprintf(path, sizeof path, "%s/cgroup.procs", cfg.cgroup);
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0)
			return 0;
		int64_t cur = -1;
		for (;;) {
			ssize_t n = read(fd, b, sizeof b);
			if (n < 0 && errno == EINTR)
				continue;
			if (n <= 0)
				break;
			for (ssize_t i = 0; i < n; i++) {
				if (b[i] >= '0' && b[i] <= '9') {
					cur = (cur < 0 ? 0 : cur) * 10 + (b[i] - '0');
					if (cur > INT_MAX)
						cur = INT_MAX;
				} else if (cur >= 0) {
					signal_pid((pid_t)cur, sig);
					found++;
					cur = -1;
				}
			}
		}
		if (cur >= 0) {
			signal_pid((pid_t)cur, sig);
			found++;
		}
		close(fd);
		return found;
	}
	list_procs();
	for (int i = 0; i < pr_n; i++) {
		pr_memo[i] = proc_is_descendant(i) ? 1 : 2;
		if (pr_memo[i] == 1) {
			signal_pid(pr_pid[i], sig);
			found++;
		}
	}
	return found;
}

/* kill_round sends SIGKILL to every member; while some remain (a member
 * may fork between listing and killing), it is repeated. */
static void kill_round(void)
{
	if (signal_tree(SIGKILL) == 0) {
		rekill = 0;
		return;
	}
	rekill = 1;
	rekill_rounds++;
	rekill_at = mono_now() + (rekill_rounds < 100 ? 5 : 100) * NS_PER_MS;
}

static void kill_tree(void)
{
	stop_phase = 2;
	if (cfg.cgroup[0]) {
		char path[HF_MAX_PATH + 32];
		snprintf(path, sizeof path, "%s/cgroup.kill", cfg.cgroup);
		int fd = open(path, O_WRONLY | O_CLOEXEC);
		if (fd >= 0) {
			ssize_t w;
			while ((w = write(fd, "1", 1)) < 0 && errno == EINTR)
				;
			close(fd);
			if (w == 1)
				return;
		}
	}
	rekill_rounds = 0;
	kill_round();
}

/* stop_tree: SIGTERM to every member, then at kill_at (grace) SIGKILL
 * (cgroup.kill in the cgroup2 tier). The first reason wins; the earliest
 * kill time wins. */
static void stop_tree(const char *reason, int64_t when)
{
	if (!stop_reason[0] && reason && reason[0])
		snprintf(stop_reason, sizeof stop_reason, "%s", reason);
	signal_tree(SIGTERM);
	if (stop_phase == 0) {
		stop_phase = 1;
		kill_at = when;
	} else if (stop_phase == 1 && when < kill_at) {
		kill_at = when;
	}
	if (stop_phase == 1 && mono_now() >= kill_at)
		kill_tree();
}

static int64_t idle_check_at(void)
{
	if (cfg.idle_ns <= 0 || idle_fired || stop_phase != 0)
		return INT64_MAX;
	int64_t at = last_activity + cfg.idle_ns;
	if (!cfg.pipe_mode) {
		int64_t step = cfg.idle_ns / 8;
		if (step < 100 * NS_PER_MS)
			step = 100 * NS_PER_MS;
		if (mono_now() + step < at)
			at = mono_now() + step;
	}
	return at;
}

/* idle_poll notices output written straight to the artifact files. */
static void idle_poll(void)
{
	int fds[2] = {HF_FD_STDOUT, HF_FD_STDERR};
	for (int i = 0; i < 2; i++) {
		struct stat st;
		if (fstat(fds[i], &st) == 0 && (int64_t)st.st_size != idle_sizes[i]) {
			idle_sizes[i] = (int64_t)st.st_size;
			last_activity = mono_now();
		}
	}
}

static void arm_timer(void)
{
	int64_t next = INT64_MAX;
	if (cfg.deadline_ns > 0 && !soft_fired)
		next = cfg.deadline_ns - cfg.grace_ns;
	int64_t idle = idle_check_at();
	if (idle < next)
		next = idle;
	if (stop_phase == 1 && kill_at < next)
		next = kill_at;
	if (rekill && rekill_at < next)
		next = rekill_at;
	if (next == timer_armed)
		return;
	struct itimerspec its;
	memset(&its, 0, sizeof its);
	if (next != INT64_MAX) {
		if (next < 1)
			next = 1;
		its.it_value.tv_sec = next / 1000000000LL;
		its.it_value.tv_nsec = next % 1000000000LL;
	}
	if (timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL) == 0)
		timer_armed = next;
}

static void on_timer(void)
{
	uint64_t ticks;
	while (read(tfd, &ticks, sizeof ticks) < 0 && errno == EINTR)
		;
	timer_armed = INT64_MAX; /* one-shot: disarmed now */
	int64_t now = mono_now();
	if (cfg.deadline_ns > 0 && !soft_fired && now >= cfg.deadline_ns - cfg.grace_ns) {
		soft_fired = 1;
		stop_tree("deadline", cfg.deadline_ns);
	}
	if (cfg.idle_ns > 0 && !idle_fired && stop_phase == 0) {
		if (!cfg.pipe_mode)
			idle_poll();
		if (now >= last_activity + cfg.idle_ns) {
			idle_fired = 1;
			stop_tree("idle", now + cfg.grace_ns);
		}
	}
	if (stop_phase == 1 && now >= kill_at)
		kill_tree();
	if (rekill && now >= rekill_at)
		kill_round();
}

/* ---- reaping ---- */

static void leader_exited(int status)
{
	int v;
	clock_gettime(CLOCK_REALTIME, &R.leader_at);
	R.has_leader = 1;
	leader_alive = 0;
	if (WIFSIGNALED(status)) {
		v = WTERMSIG(status);
		R.has_signal = 1;
		R.signal = v;
		write_receipt();
		emit("leader", 0, 0, NULL, &v, NULL, NULL);
	} else {
		v = WEXITSTATUS(status);
		R.has_code = 1;
		R.code = v;
		write_receipt();
		emit("leader", 0, 0, &v, NULL, NULL, NULL);
	}
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
			if (errno == EINTR)
				continue;
			if (errno == ECHILD)
				no_children = 1;
			else
				glog("waitpid: %s", errstr(errno));
			return;
		}
		if (p == leader_pid && leader_alive)
			leader_exited(st);
	}
}

static void on_signals(void)
{
	struct signalfd_siginfo si[16];
	int chld = 0, term = 0;
	for (;;) {
		ssize_t n = read(sfd, si, sizeof si);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		for (size_t i = 0; i < (size_t)n / sizeof si[0]; i++) {
			if (si[i].ssi_signo == SIGCHLD)
				chld = 1;
			else if (si[i].ssi_signo == SIGTERM)
				term = 1;
		}
		if ((size_t)n < sizeof si)
			break;
	}
	/* SIGTERM to the guardian is `hostfork stop` in the subreaper tier, or
	 * a systemd manager enforcing the scope's deadline at the same moment
	 * as our own timer: then the reason is the deadline. */
	if (term) {
		int64_t now = mono_now();
		if (cfg.deadline_ns > 0 && now >= cfg.deadline_ns - cfg.grace_ns - 250 * NS_PER_MS)
			stop_tree("deadline", cfg.deadline_ns);
		else
			stop_tree("user", now + cfg.grace_ns);
	}
	if (chld)
		reap();
}

/* ---- control messages after release ---- */

static char ctl_line[HF_MAX_REASON + 16];
static size_t ctl_len;
static int ctl_overflow;

static void ctl_handle(char *line)
{
	int64_t v;
	switch (line[0]) {
	case HF_MSG_SIGNAL:
		last_activity = mono_now();
		if (parse_i64(line + 1, &v) == 0 && v > 0 && v < NSIG && leader_alive)
			kill(leader_pid, (int)v); /* unreaped: the PID is still ours */
		break;
	case HF_MSG_STOP:
		stop_tree(line + 1, mono_now() + cfg.grace_ns);
		break;
	}
}

static void ctl_feed(const char *p, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		if (p[i] == '\n') {
			if (!ctl_overflow) {
				ctl_line[ctl_len] = 0;
				ctl_handle(ctl_line);
			}
			ctl_len = 0;
			ctl_overflow = 0;
		} else if (ctl_len < sizeof ctl_line - 1) {
			ctl_line[ctl_len++] = p[i];
		} else {
			ctl_overflow = 1;
		}
	}
}

static void on_control(void)
{
	char b[512];
	ssize_t n = read(HF_FD_CONTROL, b, sizeof b);
	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (n > 0) {
		ctl_feed(b, (size_t)n);
		return;
	}
	/* EOF (or an error): the owner is gone. */
	close(HF_FD_CONTROL);
	ctl_open = 0;
	if (cfg.owner_stop)
		stop_tree("owner-exit", mono_now() + cfg.grace_ns);
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
		if (w < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				return; /* wait for POLLOUT */
			tee_close_fwd(t); /* EPIPE: the reader is gone */
			return;
		}
		t->off += (size_t)w;
	}
	t->off = t->len = 0;
	if (t->eof)
		tee_close_fwd(t);
}

static void tee_read(struct tee *t)
{
	ssize_t n = read(t->src, t->buf, sizeof t->buf);
	if (n < 0 && (errno == EINTR || errno == EAGAIN))
		return;
	if (n > 0) {
		last_activity = mono_now();
		/* The artifact first: it never depends on the reader. */
		write_all(t->file, t->buf, (size_t)n);
		if (t->fwd >= 0) {
			t->off = 0;
			t->len = (size_t)n;
			tee_flush(t);
		}
		return;
	}
	if (n < 0) {
		char m[160];
		int k = snprintf(m, sizeof m, "\n[hostfork: capture error: read: %s]\n", errstr(errno));
		write_all(t->file, m, (size_t)k);
	}
	t->eof = 1;
	close(t->src);
	t->src = -1;
	close(t->file);
	t->file = -1;
	if (t->off >= t->len)
		tee_close_fwd(t);
}

static int tees_done(void)
{
	if (!cfg.pipe_mode)
		return 1;
	for (int i = 0; i < 2; i++) {
		if (!tees[i].eof || tees[i].fwd >= 0)
			return 0;
	}
	return 1;
}

/* ---- main ---- */

static void ensure_std_fds(void)
{
	for (int fd = 0; fd < 3; fd++) {
		if (fcntl(fd, F_GETFD) < 0 && errno == EBADF) {
			int n = open("/dev/null", O_RDWR);
			if (n >= 0 && n != fd) {
				dup2(n, fd);
				close(n);
			}
		}
	}
}

static int guardian(void)
{
	/* First: SIGTERM (a stop request) and SIGCHLD are read from a signalfd;
	 * a SIGTERM that arrives at the gate is handled after the release. */
	sigset_t mask;
	sigemptyset(&mask);
	sigaddset(&mask, SIGCHLD);
	sigaddset(&mask, SIGTERM);
	sigprocmask(SIG_BLOCK, &mask, NULL);
	self_pid = getpid();
	ensure_std_fds();
	for (int fd = HF_FD_CONTROL; fd <= HF_FD_FWDERR; fd++) {
		int fl = fcntl(fd, F_GETFD);
		if (fl >= 0)
			fcntl(fd, F_SETFD, fl | FD_CLOEXEC);
	}
	/* A subreaper before anything can be orphaned to us. */
	if (prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) < 0) {
		glog("PR_SET_CHILD_SUBREAPER: %s", errstr(errno));
		return 125;
	}
	static const int ignored[] = {SIGPIPE, SIGHUP, SIGINT, SIGQUIT, SIGTSTP, SIGTTIN, SIGTTOU};
	struct sigaction ign;
	memset(&ign, 0, sizeof ign);
	ign.sa_handler = SIG_IGN;
	for (size_t i = 0; i < sizeof ignored / sizeof ignored[0]; i++)
		sigaction(ignored[i], &ign, NULL);

	/* The gate: nothing runs until the launcher has durably registered our
	 * identity and sends the release. EOF here is an aborted launch. */
	int r = read_release();
	if (r == 0)
		return 0;
	if (r < 0) {
		glog("bad release message");
		return 125;
	}

	char boot[64];
	int n = read_file("/proc/sys/kernel/random/boot_id", boot, sizeof boot);
	while (n > 0 && (boot[n - 1] == '\n' || boot[n - 1] == ' '))
		boot[--n] = 0;
	if (n > 0)
		memcpy(R.boot_id, boot, (size_t)n + 1);
	struct stat st;
	if (fstat(HF_FD_RECEIPT, &st) == 0) {
		R.dev = (uint64_t)st.st_dev;
		R.ino = (uint64_t)st.st_ino;
	}
	R.stop_reason = NULL;

	static char msg[ERRMSG_MAX];
	int out = HF_FD_STDOUT, err = HF_FD_STDERR;
	int tp[2][2];
	if (cfg.pipe_mode) {
		/* Tee: the workload writes into pipes that the guardian copies to
		 * the artifact files and forwards to the launcher. Losing the
		 * launcher loses only the forward copy, never the artifact. */
		if (pipe2(tp[0], O_CLOEXEC) < 0 || pipe2(tp[1], O_CLOEXEC) < 0) {
			snprintf(msg, sizeof msg, "creating output pipes: %s", errstr(errno));
			return start_failed(msg, 125);
		}
		out = tp[0][1];
		err = tp[1][1];
		/* Larger pipes: fewer wakeups per byte on the hot path. Best
		 * effort (capped by /proc/sys/fs/pipe-max-size). */
		for (int i = 0; i < 2; i++)
			fcntl(tp[i][0], F_SETPIPE_SZ, 1 << 20);
	}
	sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (sfd < 0 || tfd < 0) {
		snprintf(msg, sizeof msg, "creating signalfd/timerfd: %s", errstr(errno));
		return start_failed(msg, 125);
	}
	int serr = 0;
	pid_t pid = start_workload(HF_FD_STDIN, out, err, msg, sizeof msg, &serr);
	release_done();
	close(HF_FD_STDIN);
	if (cfg.pipe_mode) {
		close(out);
		close(err);
	}
	if (pid < 0) {
		int code = 125;
		if (serr == ENOENT)
			code = 127;
		else if (serr == EACCES || serr == ENOEXEC || serr == EISDIR)
			code = 126;
		return start_failed(msg, code);
	}
	if (cfg.pipe_mode) {
		int fwd[2] = {HF_FD_FWDOUT, HF_FD_FWDERR}, file[2] = {HF_FD_STDOUT, HF_FD_STDERR};
		for (int i = 0; i < 2; i++) {
			struct tee *t = &tees[i];
			t->src = tp[i][0];
			t->file = file[i];
			t->fwd = fwd[i];
			fcntl(t->src, F_SETFL, fcntl(t->src, F_GETFL) | O_NONBLOCK);
			int fl = fcntl(t->fwd, F_GETFL);
			if (fl < 0)
				t->fwd = -1;
			else
				fcntl(t->fwd, F_SETFL, fl | O_NONBLOCK);
		}
	} else if (cfg.idle_ns <= 0) {
		close(HF_FD_STDOUT);
		close(HF_FD_STDERR);
	} /* else: kept (close-on-exec) to watch the artifacts grow */
	last_activity = mono_now();
	if (!cfg.pipe_mode && cfg.idle_ns > 0)
		idle_poll(), last_activity = mono_now();
	leader_pid = pid;
	leader_alive = 1;
	read_stat(pid, NULL, NULL, &R.workload_start);
	write_receipt();
	emit("started", pid, R.workload_start, NULL, NULL, NULL, NULL);

	if (ctl_early_len)
		ctl_feed(ctl_early, ctl_early_len);
	for (;;) {
		if (no_children && tees_done())
			break;
		arm_timer();
		struct pollfd pfd[7];
		int np = 0, ip_sig, ip_tim, ip_ctl = -1, ip_src[2] = {-1, -1}, ip_fwd[2] = {-1, -1};
		ip_sig = np;
		pfd[np++] = (struct pollfd){sfd, POLLIN, 0};
		ip_tim = np;
		pfd[np++] = (struct pollfd){tfd, POLLIN, 0};
		if (ctl_open) {
			ip_ctl = np;
			pfd[np++] = (struct pollfd){HF_FD_CONTROL, POLLIN, 0};
		}
		for (int i = 0; cfg.pipe_mode && i < 2; i++) {
			struct tee *t = &tees[i];
			if (t->off < t->len && t->fwd >= 0) {
				ip_fwd[i] = np;
				pfd[np++] = (struct pollfd){t->fwd, POLLOUT, 0};
			} else if (!t->eof) {
				ip_src[i] = np;
				pfd[np++] = (struct pollfd){t->src, POLLIN, 0};
			}
		}
		if (poll(pfd, (nfds_t)np, -1) < 0) {
			if (errno != EINTR)
				glog("poll: %s", errstr(errno));
			continue;
		}
		if (pfd[ip_sig].revents)
			on_signals();
		if (pfd[ip_tim].revents)
			on_timer();
		if (ip_ctl >= 0 && pfd[ip_ctl].revents)
			on_control();
		for (int i = 0; i < 2; i++) {
			if (ip_src[i] >= 0 && pfd[ip_src[i]].revents)
				tee_read(&tees[i]);
			if (ip_fwd[i] >= 0 && pfd[ip_fwd[i]].revents)
				tee_flush(&tees[i]);
		}
	}
	clock_gettime(CLOCK_REALTIME, &R.tree_at);
	R.has_tree = 1;
	R.complete = 1;
	R.stop_reason = stop_reason;
	write_receipt();
	emit("tree", 0, 0, NULL, NULL, stop_reason, NULL);
	return 0;
}

/* cmdline_mode is the fallback for a libc that does not pass argv to
 * constructors: argv[1] from /proc/self/cmdline. */
static int cmdline_mode(void)
{
	char b[256];
	int n = read_file("/proc/self/cmdline", b, sizeof b);
	if (n <= 0)
		return 0;
	size_t l0 = strnlen(b, (size_t)n);
	if ((int)l0 + 1 >= n)
		return 0;
	return !strcmp(b + l0 + 1, HF_GUARDIAN_MODE);
}

__attribute__((constructor)) static void hf_guardian_ctor(int argc, char **argv, char **envp)
{
	(void)envp;
	int mode;
	if (argc > 0 && argv)
		mode = argc >= 2 && argv[1] && !strcmp(argv[1], HF_GUARDIAN_MODE);
	else
		mode = cmdline_mode();
	if (mode)
		_exit(guardian());
}
