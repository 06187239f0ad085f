/*
 * Helpers shared by the guardian and the keeper. No heap: static buffers
 * and one anonymous mapping per message.
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include "hf.h"

const char *hf_guardian_mode(void) { return HF_GUARDIAN_MODE; }

static const char *reason_names[HF_R_MAX + 1] = {
	"", "user", "deadline", "idle", "owner-exit", "timeout", "cancelled",
	"completed", "keeper-lost", "limit", "abandoned",
};

const char *hf_reason_name(int code)
{
	if (code < 0 || code > HF_R_MAX)
		return "";
	return reason_names[code];
}

int hf_reason_code(const char *name)
{
	for (int i = 1; i <= HF_R_MAX; i++)
		if (!strcmp(name, reason_names[i]))
			return i;
	return HF_R_NONE;
}

int64_t hf_mono_now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

void hf_write_all(int fd, const char *p, size_t n)
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

int hf_log_dirfd = -1;
static int log_fd = 2;
static int log_opened;

void hf_log_to(int fd) { log_fd = fd, log_opened = 1; }

void hf_log(const char *fmt, ...)
{
	static char b[1024];
	int saved = errno;
	if (!log_opened && hf_log_dirfd >= 0) {
		/* The log is made on first use: most commands never write one. */
		int fd = openat(hf_log_dirfd, "guardian.log", O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW, 0600);
		if (fd >= 0)
			log_fd = fd;
		log_opened = 1;
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

int hf_read_fileat(int dirfd, const char *path, char *buf, size_t cap)
{
	int fd = openat(dirfd, path, O_RDONLY | O_CLOEXEC);
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

int hf_read_file(const char *path, char *buf, size_t cap) { return hf_read_fileat(AT_FDCWD, path, buf, cap); }

int hf_write_fileat(int dirfd, const char *path, const char *val)
{
	int fd = openat(dirfd, path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -1;
	size_t n = strlen(val);
	ssize_t w;
	while ((w = write(fd, val, n)) < 0 && errno == EINTR)
		;
	int saved = errno;
	close(fd);
	errno = saved;
	return w == (ssize_t)n ? 0 : -1;
}

int hf_parse_i64(const char *s, int64_t *out)
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

int64_t hf_read_deadline(int dirfd, const char *path)
{
	char b[32];
	int64_t v;
	int n = hf_read_fileat(dirfd, path, b, sizeof b);
	while (n > 0 && b[n - 1] == '\n')
		b[--n] = 0;
	if (n <= 0 || hf_parse_i64(b, &v) < 0 || v <= 0)
		return -1;
	return v;
}

int hf_copy_bounded(char *dst, size_t cap, const char *src)
{
	size_t n = strlen(src);
	if (n >= cap)
		return -1;
	memcpy(dst, src, n + 1);
	return 0;
}

/* hf_read_stat_full parses /proc/PID/stat; fields are counted from the last
 * ')', since the command name may contain spaces and parentheses. Each out
 * pointer may be NULL. */
int hf_read_stat_full(pid_t pid, char *state, pid_t *ppid, int *threads, uint64_t *start)
{
	static char b[2048];
	char path[48];
	snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
	int n = hf_read_file(path, b, sizeof b);
	if (n <= 0)
		return -1;
	char *p = memrchr(b, ')', (size_t)n);
	if (!p || p + 2 >= b + n)
		return -1;
	p += 2;
	/* p is field 3 (state); ppid is field 4, num_threads field 20,
	 * starttime field 22. */
	for (int field = 3; field <= 22; field++) {
		char *end = p;
		while (*end && *end != ' ')
			end++;
		if (end == p)
			return -1;
		if (field == 3 && state)
			*state = *p;
		if (field == 4 || field == 20 || field == 22) {
			char c = *end;
			*end = 0;
			int64_t v;
			int bad = hf_parse_i64(p, &v) < 0;
			*end = c;
			if (bad)
				return -1;
			if (field == 4 && ppid)
				*ppid = (pid_t)v;
			if (field == 20 && threads)
				*threads = (int)v;
			if (field == 22) {
				if (start)
					*start = (uint64_t)v;
				return 0;
			}
		}
		if (!*end)
			return -1;
		p = end + 1;
	}
	return -1;
}

int hf_read_stat(pid_t pid, char *state, pid_t *ppid, uint64_t *start) { return hf_read_stat_full(pid, state, ppid, NULL, start); }

/* ---- NUL-framed messages ---- */

int hf_read_msg(int fd, struct hf_msg *m)
{
	/* Room for the message plus the pointer arrays its reader builds after
	 * it (at most one 8-byte pointer per 5 bytes). Only touched pages
	 * count. */
	m->map = (size_t)HF_MAX_RELEASE * 3;
	m->buf = mmap(NULL, m->map, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
	if (m->buf == MAP_FAILED) {
		hf_log("mapping a message buffer: %s", hf_errstr(errno));
		m->buf = NULL;
		return -1;
	}
	size_t len = 0, scan = 1, cur = 1;
	for (;;) {
		if (len >= (size_t)HF_MAX_RELEASE) {
			hf_log("message too large");
			return -1;
		}
		ssize_t n = read(fd, m->buf + len, (size_t)HF_MAX_RELEASE - len);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			return 0;
		}
		if (n == 0)
			return 0;
		len += (size_t)n;
		if (m->buf[0] != HF_MSG_RELEASE) {
			hf_log("bad message");
			return -1;
		}
		for (; scan < len; scan++) {
			if (m->buf[scan])
				continue;
			if (scan == cur) {
				/* The empty string: the end of the message. */
				size_t extra = len - scan - 1;
				if (extra > sizeof m->extra)
					extra = sizeof m->extra;
				memcpy(m->extra, m->buf + scan + 1, extra);
				m->nextra = extra;
				m->buf[scan] = 0;
				m->len = scan;
				return 1;
			}
			cur = scan + 1;
		}
	}
}

void hf_free_msg(struct hf_msg *m)
{
	if (m->buf)
		munmap(m->buf, m->map);
	m->buf = NULL;
}

/* ---- JSON ---- */

void hf_sb_raw(struct hf_sb *b, const char *s, size_t n)
{
	if (n > b->cap - b->len)
		n = b->cap - b->len;
	memcpy(b->p + b->len, s, n);
	b->len += n;
}

void hf_sb_s(struct hf_sb *b, const char *s) { hf_sb_raw(b, s, strlen(s)); }

void hf_sb_u64(struct hf_sb *b, uint64_t v)
{
	char t[24];
	int i = sizeof t;
	do {
		t[--i] = (char)('0' + v % 10);
		v /= 10;
	} while (v);
	hf_sb_raw(b, t + i, sizeof t - (size_t)i);
}

void hf_sb_i64(struct hf_sb *b, int64_t v)
{
	if (v < 0) {
		hf_sb_raw(b, "-", 1);
		hf_sb_u64(b, (uint64_t)0 - (uint64_t)v);
	} else {
		hf_sb_u64(b, (uint64_t)v);
	}
}

/* hf_sb_str writes s as a JSON string, with at most max bytes of escaped
 * content. Other bytes pass through: valid UTF-8 stays as it is (invalid
 * UTF-8 becomes U+FFFD in Go's decoder). */
void hf_sb_str(struct hf_sb *b, const char *s, size_t max)
{
	static const char hex[] = "0123456789abcdef";
	size_t used = 0;
	hf_sb_raw(b, "\"", 1);
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
		hf_sb_raw(b, e, n);
		used += n;
	}
	hf_sb_raw(b, "\"", 1);
}

/* hf_sb_time writes ts as Go's time.RFC3339Nano in UTC, quoted. */
void hf_sb_time(struct hf_sb *b, const struct timespec *ts)
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
	hf_sb_raw(b, t, (size_t)n);
}
