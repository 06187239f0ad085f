/*
 * Helpers shared by the guardian and the keeper: static buffers and one
 * anonymous mapping per message (the tree stop reads directories with the
 * C library's opendir).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "hf.h"

int64_t hf_mono_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

int hf_write_all(int fd, const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(fd, p, n);
		if (w < 0)
			return -1;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

char hf_oom_adj[16];

void hf_helper_start(sigset_t *mask, int chld, int last)
{
	/* Out of the OOM killer's choice (-1000; it takes CAP_SYS_RESOURCE,
	 * so unprivileged it stays): a cgroup's OOM must take a workload,
	 * never its witness. The inherited value is kept for the workload. */
	if (hf_read_file("/proc/self/oom_score_adj", hf_oom_adj, sizeof hf_oom_adj) < 0)
		hf_oom_adj[0] = 0;
	hf_write_file("/proc/self/oom_score_adj", "-1000");
	static const int ignored[] = {SIGPIPE, SIGHUP, SIGINT, SIGQUIT, SIGTSTP, SIGTTIN, SIGTTOU, SIGUSR1, SIGUSR2, SIGWINCH};
	sigemptyset(mask);
	sigaddset(mask, SIGTERM);
	sigaddset(mask, HF_SIG_DEADLINE); /* a moved deadline (hf.h) */
	if (chld)
		sigaddset(mask, SIGCHLD);
	sigprocmask(SIG_BLOCK, mask, NULL);
	for (size_t i = 0; i < sizeof ignored / sizeof ignored[0]; i++)
		signal(ignored[i], SIG_IGN);
	/* One by one, not close_range(CLOSE_RANGE_CLOEXEC): that takes Linux
	 * 5.11, and the guardian's other calls need only 5.8. */
	for (int fd = 3; fd <= last; fd++) {
		int fl = fcntl(fd, F_GETFD);
		if (fl >= 0)
			fcntl(fd, F_SETFD, fl | FD_CLOEXEC);
	}
}

int hf_arm_timer(int tfd, int64_t at)
{
	struct itimerspec its = {{0, 0}, {0, 0}};
	if (at != INT64_MAX) {
		at = at < 1 ? 1 : at;
		its.it_value.tv_sec = at / 1000000000LL;
		its.it_value.tv_nsec = at % 1000000000LL;
	}
	return timerfd_settime(tfd, TFD_TIMER_ABSTIME, &its, NULL);
}

int hf_log_dirfd = -1;
static int log_fd = 2;

void hf_log(const char *fmt, ...)
{
	static char b[1024];
	int saved = errno;
	if (hf_log_dirfd >= 0) {
		/* The log is made on first use: most commands never write one. */
		int fd = openat(hf_log_dirfd, "guardian.log", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd >= 0)
			log_fd = fd;
		hf_log_dirfd = -1; /* one try */
	}
	int n = snprintf(b, sizeof b, "hostfork: ");
	va_list ap;
	va_start(ap, fmt);
	n += vsnprintf(b + n, sizeof b - (size_t)n - 1, fmt, ap);
	va_end(ap);
	if (n > (int)sizeof b - 2)
		n = (int)sizeof b - 2;
	b[n++] = '\n';
	hf_write_all(log_fd, b, (size_t)n);
	errno = saved;
}

/* hf_errstr is Go's rendering of an errno: strerror with a lower-case first
 * letter ("no such file or directory"). */
const char *hf_errstr(int err)
{
	static char b[128];
	snprintf(b, sizeof b, "%s", strerror(err));
	if (b[0] >= 'A' && b[0] <= 'Z' && !(b[1] >= 'A' && b[1] <= 'Z'))
		b[0] = (char)(b[0] - 'A' + 'a');
	return b;
}

int hf_read_file(const char *path, char *buf, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n = 0;
	size_t len = 0;
	while (fd >= 0 && len < cap - 1 && (n = read(fd, buf + len, cap - 1 - len)) > 0)
		len += (size_t)n;
	if (fd >= 0)
		close(fd);
	buf[len] = 0;
	return fd < 0 || n < 0 ? -1 : (int)len;
}

int hf_write_file(const char *path, const char *val)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t n = strlen(val);
	ssize_t w = write(fd, val, n);
	int saved = errno;
	close(fd);
	errno = saved;
	return w == (ssize_t)n ? 0 : -1;
}

int hf_parse_i64(const char *s, int64_t *out)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (!((s[0] >= '0' && s[0] <= '9') || (s[0] == '-' && s[1] >= '0' && s[1] <= '9')) || *end || errno)
		return -1;
	*out = v;
	return 0;
}

void hf_read_deadline(int dirfd, const char *path, int64_t *deadline)
{
	char b[32] = {0};
	int64_t v;
	int fd = openat(dirfd, path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, b, sizeof b - 1);
	if (fd >= 0)
		close(fd);
	if (n > 0 && b[n - 1] == '\n') /* MoveDeadline's one newline */
		b[n - 1] = 0;
	if (n > 0 && hf_parse_i64(b, &v) == 0 && v > 0)
		*deadline = v;
}

/* hf_read_stat counts fields from the last ')', since the command name may
 * contain spaces and parentheses. */
int hf_read_stat(pid_t pid, struct hf_stat *st)
{
	static char b[2048];
	char path[48];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	int n = hf_read_file(path, b, sizeof b);
	char *p = n > 0 ? memrchr(b, ')', (size_t)n) : NULL;
	/* Fields 3 (state), 4 (ppid), 9 (flags), 20 (threads), 22 (start). */
	if (!p || sscanf(p + 1, " %c %d %*s %*s %*s %*s %u %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %d %*s %llu",
	              &st->state, &st->ppid, &st->flags, &st->threads, &st->start) != 5)
		return -1;
	return 0;
}

/* hf_set_key stores val where the entries of keys named key say; it
 * returns 1 when one was set, 0 for an unknown key, -1 for a bad value. */
int hf_set_key(const struct hf_key *keys, const char *key, char *val)
{
	int found = 0;
	for (const struct hf_key *k = keys; k->name; k++) {
		int64_t n;
		struct hf_vec *vec = k->dst;
		if (strcmp(k->name, key))
			continue;
		found = 1;
		if (k->kind == 's' && snprintf(k->dst, k->arg, "%s", val) >= (int)k->arg) {
			*(char *)k->dst = 0; /* never a cut value (a command id names a directory) */
			return -1;
		}
		if (k->kind == 'p')
			*(const char **)k->dst = val;
		if (k->kind == 'f')
			*(int *)k->dst = !strcmp(val, k->eq);
		if (k->kind == 'i' && (hf_parse_i64(val, &n) < 0 || (k->arg && (n < 0 || n > (int64_t)k->arg))))
			return -1;
		if (k->kind == 'i')
			*(int64_t *)k->dst = n;
		if (k->kind == 'v' && k->arg && vec->n >= k->arg)
			return -1;
		if (k->kind == 'v')
			vec->v[vec->n++] = val;
	}
	return found;
}

int hf_parse_msg(struct hf_msg *m, const struct hf_key *keys, int (*fn)(char *key, char *val, char **next))
{
	char *next;
	for (char *p = m->buf; p < m->buf + m->len; p = next) {
		next = p + strlen(p) + 1;
		char *v = strchr(p, '=');
		int r = -1;
		if (v) {
			*v++ = 0;
			r = fn ? fn(p, v, &next) : 0;
		}
		if (r == 0)
			r = hf_set_key(keys, p, v);
		if (r <= 0) {
			hf_log("bad or unknown entry %.64s in a message", p);
			return -1;
		}
	}
	return 0;
}

/* ---- length-framed messages ---- */

/* read_full reads n bytes unless EOF or an error comes first; it returns
 * the number read. */
static size_t read_full(int fd, void *p, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = read(fd, (char *)p + got, n - got);
		if (r <= 0)
			break;
		got += (size_t)r;
	}
	return got;
}

int hf_read_msg(int fd, struct hf_msg *m)
{
	uint32_t len;
	if (read_full(fd, &len, sizeof len) < sizeof len)
		return 0;
	if (len > HF_MAX_RELEASE) {
		hf_log("message too large");
		return -1;
	}
	/* Room for the message, the NUL after it, and two pointer arrays its
	 * reader builds after it (each at most one 8-byte pointer per 5
	 * bytes, and its NULL): sized by this message, as strict overcommit
	 * charges all of it. */
	m->map = (size_t)len * 5 + 4096;
	m->buf = mmap(NULL, m->map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m->buf == MAP_FAILED) {
		hf_log("mapping a message buffer: %s", hf_errstr(errno));
		m->buf = NULL;
		return -1;
	}
	m->len = len;
	return read_full(fd, m->buf, len) == len;
}

void hf_free_msg(struct hf_msg *m)
{
	if (m->buf)
		munmap(m->buf, m->map);
	m->buf = NULL;
}

int hf_read_lines(int fd, struct hf_lines *l, void (*fn)(char *line))
{
	char b[512];
	ssize_t n = read(fd, b, sizeof b);
	if (n < 0 && errno == EAGAIN)
		return 0;
	for (ssize_t i = 0; i < n; i++) {
		if (b[i] != '\n') {
			l->overflow |= l->len == sizeof l->buf - 1;
			if (!l->overflow)
				l->buf[l->len++] = b[i];
			continue;
		}
		l->buf[l->len] = 0;
		if (!l->overflow)
			fn(l->buf);
		l->len = 0;
		l->overflow = 0;
	}
	return n > 0 ? 0 : -1;
}
