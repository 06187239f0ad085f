/*
 * The session loop of the guardian (docs/sessions.md): a command started
 * with a terminal (session=tty) or with a held stdin pipe (session=stdin)
 * gets a unix socket, session.sock in its run directory (0600, the store
 * owner's), that clients attach to. The guardian holds the pty master or
 * the stdin pipe's write end, so the session outlives every client.
 *
 * Output: everything the pty shows is appended to the command's log (its
 * stdout file) first; each client is then served from the log by byte
 * offset (sendfile), so a client only costs a position and a few counters,
 * never a buffer of output, and a slow one never holds the workload back:
 * it lags in the log, and more than LAG_MAX behind it skips ahead with a
 * marker frame. Input: one client's frame at a time is written to the
 * pty (or pipe), whole and in order. Static memory only.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <termios.h>
#include <time.h>
#include <unistd.h>

#include "hf.h"

#define MAXC HF_SESS_MAXC
#define IN_MAX HF_SESS_IN_MAX     /* a client frame's payload limit */
#define CHUNK (64 << 10)          /* an output frame's payload at most */
#define LAG_MAX (8 << 20)         /* behind by more: skip ahead */
#define SKIP_TO (64 << 10)        /* ... to this far behind the end */
#define CTL_MAX 256
#define SOCK_NAME "session.sock"

static int mode; /* 0 none, HF_SESS_TTY, HF_SESS_STDIN */
int hf_sess_tty, hf_sess_stdin;
int64_t hf_sess_cols = 80, hf_sess_rows = 24;
static int master = -1, slave = -1; /* the pty */
static int inw = -1;                          /* where input goes */
static int logw = -1, logr = -1, lsock = -1;
static char pts[64]; /* the terminal's name */
static int64_t log_end;
static int pty_eof, leader_done, exit_code = -1, exit_sig;
static int64_t exit_at; /* when the exit frame may go: the leader's output is in */
#define SETTLE (200 * NS_PER_MS) /* at most this long after the leader */
struct timespec hf_sess_last_in, hf_sess_last_out;
static int64_t act_mono, receipt_due;
static char obuf[CHUNK];

struct client {
	int fd, hello, flags, closing, exit_sent;
	int full; /* its socket's buffer was full: wait for POLLOUT */
	int64_t pos;         /* the next log byte to send */
	uint32_t frame_left; /* payload bytes of the current output frame */
	unsigned char hdr[5];
	int hdr_off, hdr_len; /* an output frame header not yet sent */
	char ctl[CTL_MAX];    /* control frames not yet sent */
	int ctl_len;
	unsigned char ih[5];
	int ih_len;
	uint32_t in_need, in_len, in_off;
	char in[IN_MAX];
};
static struct client cl[MAXC];
static int busy = -1; /* the client whose data frame is being written */

static void put(unsigned char *p, uint64_t v, int n) /* n bytes, big-endian */
{
	while (n--)
		p[n] = (unsigned char)v, v >>= 8;
}

/* hf_session_setup makes the pty or the stdin pipe and the socket before
 * the workload starts, replacing *in (and *out, *err for a tty). */
int hf_session_setup(int *in, int *out, int *err, char *msg, size_t cap)
{
	mode = hf_sess_tty ? HF_SESS_TTY : hf_sess_stdin ? HF_SESS_STDIN : 0;
	if (!mode)
		return 0;
	char p[64];
	snprintf(p, sizeof p, "/proc/self/fd/%d", HF_FD_STDOUT);
	logr = open(p, O_RDONLY | O_CLOEXEC);
	logw = fcntl(HF_FD_STDOUT, F_DUPFD_CLOEXEC, 3);
	if (logr < 0 || logw < 0) {
		snprintf(msg, cap, "session: opening the log: %s", hf_errstr(errno));
		return -1;
	}
	log_end = lseek(logr, 0, SEEK_END);
	if (mode == HF_SESS_TTY) {
		master = posix_openpt(O_RDWR | O_NOCTTY | O_CLOEXEC);
		if (master < 0 || grantpt(master) < 0 || unlockpt(master) < 0 || ptsname_r(master, pts, sizeof pts) != 0 ||
		    (slave = open(pts, O_RDWR | O_NOCTTY | O_CLOEXEC)) < 0) {
			snprintf(msg, cap, "session: opening a pseudo-terminal: %s", hf_errstr(errno));
			return -1;
		}
		struct winsize ws = {.ws_row = (unsigned short)hf_sess_rows, .ws_col = (unsigned short)hf_sess_cols};
		ioctl(master, TIOCSWINSZ, &ws);
		fcntl(master, F_SETFL, O_RDWR | O_NONBLOCK);
		inw = master;
		*in = *out = *err = slave;
	} else {
		int fds[2];
		if (pipe2(fds, O_CLOEXEC) < 0) {
			snprintf(msg, cap, "session: creating the stdin pipe: %s", hf_errstr(errno));
			return -1;
		}
		inw = fds[1];
		fcntl(inw, F_SETFL, O_WRONLY | O_NONBLOCK);
		*in = fds[0];
	}
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	snprintf(a.sun_path, sizeof a.sun_path, "/proc/self/fd/%d/" SOCK_NAME, HF_FD_DIR);
	unlinkat(HF_FD_DIR, SOCK_NAME, 0); /* a former guardian's, never ours */
	lsock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	mode_t old = umask(0177);
	int b = lsock < 0 ? -1 : bind(lsock, (struct sockaddr *)&a, sizeof a);
	umask(old);
	if (b < 0 || listen(lsock, 16) < 0) {
		snprintf(msg, cap, "session: making its socket: %s", hf_errstr(errno));
		return -1;
	}
	for (int i = 0; i < MAXC; i++)
		cl[i].fd = -1;
	return 0;
}

/* hf_session_child runs in the workload's child: a new session whose
 * controlling terminal is the pty, or a new process group. */
int hf_session_child(void)
{
	if (mode != HF_SESS_TTY)
		return setpgid(0, 0);
	if (setsid() < 0)
		return -1;
	return ioctl(slave, TIOCSCTTY, 0);
}

static void activity(struct timespec *t)
{
	clock_gettime(CLOCK_REALTIME, t);
	act_mono = hf_mono_now();
	if (!receipt_due)
		receipt_due = act_mono + 1000 * NS_PER_MS;
}

static void ctl_frame(struct client *c, char type, const void *p, uint32_t n)
{
	if (c->ctl_len + 5 + (int)n > CTL_MAX) {
		c->closing = 1; /* not reading its control frames: dropped */
		c->ctl_len = 0;
		shutdown(c->fd, SHUT_RDWR);
		return;
	}
	unsigned char *h = (unsigned char *)c->ctl + c->ctl_len;
	h[0] = (unsigned char)type;
	put(h + 1, n, 4);
	memcpy(h + 5, p, n);
	c->ctl_len += 5 + (int)n;
}

static void fail(struct client *c, const char *why)
{
	ctl_frame(c, 'E', why, (uint32_t)strlen(why));
	c->closing = 1;
	if (busy == c - cl)
		busy = -1;
}

static void drop(struct client *c)
{
	close(c->fd);
	if (busy == c - cl)
		busy = -1;
	memset(c, 0, offsetof(struct client, in));
	c->fd = -1;
}

/* refresh_end takes the log's size: the workload writes it (stdin), or
 * read_pty did. */
static void refresh_end(void)
{
	off_t end = lseek(logr, 0, SEEK_END);
	if (end > log_end) {
		log_end = end;
		activity(&hf_sess_last_out);
	}
}

/* write_input writes the rest of c's data frame; busy while it blocks. */
static void write_input(struct client *c)
{
	while (c->in_off < c->in_len) {
		ssize_t w = write(inw, c->in + c->in_off, c->in_len - c->in_off);
		if (w < 0 && errno == EAGAIN) {
			busy = (int)(c - cl);
			return;
		}
		if (w < 0) {
			fail(c, "the command no longer reads its input");
			return;
		}
		c->in_off += (uint32_t)w;
	}
	busy = -1;
	activity(&hf_sess_last_in);
}

static void frame(struct client *c, unsigned char type, char *p, uint32_t n)
{
	if (!c->hello && type != 'h')
		return fail(c, "the first frame must be hello");
	switch (type) {
	case 'h': {
		if (n != 9 || c->hello)
			return fail(c, "bad hello frame");
		uint64_t want = 0;
		for (int i = 0; i < 8; i++) /* big-endian */
			want = want << 8 | (unsigned char)p[i];
		c->flags = (unsigned char)p[8];
		refresh_end();
		c->pos = want >= (uint64_t)log_end ? 0 : log_end - (int64_t)want;
		if (c->flags & HF_SESS_NO_OUTPUT)
			c->pos = log_end;
		c->hello = 1;
		unsigned char h[17];
		h[0] = (unsigned char)mode;
		put(h + 1, (uint64_t)c->pos, 8);
		put(h + 9, (uint64_t)log_end, 8);
		return ctl_frame(c, 'H', h, sizeof h);
	}
	case 'd':
		if (c->flags & HF_SESS_NO_INPUT)
			return fail(c, "this client attached without input");
		if (inw < 0)
			return fail(c, "the command's input is closed");
		c->in_len = n, c->in_off = 0;
		return write_input(c);
	case 'r': {
		if (mode != HF_SESS_TTY)
			return fail(c, "the command has no terminal to resize: start it with --tty");
		unsigned char *u = (unsigned char *)p;
		struct winsize ws = {.ws_col = (unsigned short)(u[0] << 8 | u[1]), .ws_row = (unsigned short)(u[2] << 8 | u[3])};
		if (n != 4 || !ws.ws_col || !ws.ws_row) /* p has IN_MAX bytes: read before the check */
			return fail(c, "bad resize frame: give columns and rows above 0");
		ioctl(master, TIOCSWINSZ, &ws);
		return activity(&hf_sess_last_in);
	}
	case 'e':
		if (mode == HF_SESS_STDIN && inw >= 0) {
			close(inw);
			inw = -1;
		} else if (mode == HF_SESS_TTY) {
			struct termios t;
			if (tcgetattr(master, &t) == 0) {
				c->in[0] = (char)t.c_cc[VEOF];
				c->in_len = 1, c->in_off = 0;
				write_input(c);
			}
		}
		return activity(&hf_sess_last_in);
	case 's':
		return ctl_frame(c, 's', "", 0);
	}
	fail(c, "unknown frame type");
}

static void on_readable(struct client *c)
{
	while (!c->closing && busy < 0) {
		ssize_t r;
		if (c->ih_len < 5)
			r = read(c->fd, c->ih + c->ih_len, (size_t)(5 - c->ih_len));
		else
			r = read(c->fd, c->in + c->in_len, c->in_need - c->in_len);
		if (r < 0 && errno == EAGAIN)
			return;
		if (r <= 0) {
			drop(c);
			return;
		}
		if (c->ih_len < 5) {
			c->ih_len += (int)r;
			if (c->ih_len < 5)
				continue;
			c->in_need = (uint32_t)c->ih[1] << 24 | (uint32_t)c->ih[2] << 16 | (uint32_t)c->ih[3] << 8 | c->ih[4];
			c->in_len = 0;
			if (c->in_need > IN_MAX) {
				char m[96];
				snprintf(m, sizeof m, "a frame of %u bytes is over the limit of %d", c->in_need, IN_MAX);
				return fail(c, m);
			}
		} else {
			c->in_len += (uint32_t)r;
		}
		if (c->in_len == c->in_need) {
			c->ih_len = 0;
			frame(c, c->ih[0], c->in, c->in_len);
		}
	}
}

/* exit_due: the exit frame may go (after the output the leader left). */
static int exit_due(void)
{
	return leader_done && (pty_eof || hf_mono_now() >= exit_at);
}

/* on_writable sends control frames, then output from the log. */
static void on_writable(struct client *c)
{
	for (;;) {
		if (c->hdr_off < c->hdr_len) {
			ssize_t w = write(c->fd, c->hdr + c->hdr_off, (size_t)(c->hdr_len - c->hdr_off));
			if (w <= 0)
				goto blocked;
			c->hdr_off += (int)w;
			continue;
		}
		if (c->frame_left) { /* from the page cache, no copy here */
			off_t at = c->pos;
			ssize_t w = sendfile(c->fd, logr, &at, c->frame_left);
			if (w == 0)
				return drop(c); /* the log was cut under a frame */
			if (w < 0)
				goto blocked;
			c->pos += w, c->frame_left -= (uint32_t)w;
			continue;
		}
		if (c->ctl_len) {
			ssize_t w = write(c->fd, c->ctl, (size_t)c->ctl_len);
			if (w <= 0)
				goto blocked;
			memmove(c->ctl, c->ctl + w, (size_t)(c->ctl_len - w));
			c->ctl_len -= (int)w;
			continue;
		}
		if (c->closing)
			return drop(c);
		if (!c->hello || c->exit_sent)
			return;
		if (log_end - c->pos > LAG_MAX) {
			unsigned char k[8];
			c->pos = log_end - SKIP_TO;
			put(k, (uint64_t)c->pos, 8);
			ctl_frame(c, 'k', k, 8);
			continue;
		}
		if (c->pos < log_end) {
			int64_t n = log_end - c->pos < CHUNK ? log_end - c->pos : CHUNK;
			c->hdr[0] = 'o';
			put(c->hdr + 1, (uint64_t)n, 4);
			c->hdr_off = 0, c->hdr_len = 5, c->frame_left = (uint32_t)n;
			continue;
		}
		if (exit_due()) {
			unsigned char x[8];
			put(x, (uint32_t)exit_code, 4);
			put(x + 4, (uint32_t)exit_sig, 4);
			ctl_frame(c, 'x', x, 8);
			c->exit_sent = c->closing = 1;
			continue;
		}
		return;
	}
blocked:
	if (errno != EAGAIN)
		drop(c);
	else
		c->full = 1;
}

static int wants_out(struct client *c)
{
	return c->hdr_off < c->hdr_len || c->frame_left || c->ctl_len || c->closing ||
	    (c->hello && !c->exit_sent && (c->pos < log_end || exit_due()));
}

/* read_pty appends what the terminal shows to the log. */
static void read_pty(void)
{
	for (;;) { /* the pty gives 4 KiB a read: gather up to CHUNK a write */
		ssize_t n = 0, r = 0;
		while (n < CHUNK && (r = read(master, obuf + n, (size_t)(CHUNK - n))) > 0)
			n += r;
		if (n > 0 && logw >= 0 && hf_write_all(logw, obuf, (size_t)n) < 0) {
			hf_log("writing the session's log: %s; it is cut here", hf_errstr(errno));
			hf_output_truncated = 1;
			close(logw);
			logw = -1;
		}
		if (n > 0)
			activity(&hf_sess_last_out);
		refresh_end();
		if (r == 0 || (r < 0 && errno != EAGAIN))
			pty_eof = 1; /* EIO: no process holds the terminal any more */
		if (n < CHUNK)
			return;
	}
}

static void on_accept(void)
{
	for (;;) {
		int fd = accept4(lsock, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		struct ucred cr;
		socklen_t l = sizeof cr;
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &l) < 0 || (cr.uid != 0 && cr.uid != geteuid())) {
			close(fd);
			continue;
		}
		int i = 0;
		while (i < MAXC && cl[i].fd >= 0)
			i++;
		if (i == MAXC) {
			static const char m[] = "E\0\0\0\x1dtoo many clients are attached";
			(void)!write(fd, m, sizeof m - 1);
			close(fd);
			continue;
		}
		cl[i].fd = fd;
	}
}

int hf_session_pollfds(struct pollfd *p, int max)
{
	int n = 0;
	if (!mode || max < MAXC + 3)
		return 0;
	refresh_end();
	p[n++] = (struct pollfd){lsock, POLLIN, 0};
	short mev = (short)(pty_eof ? 0 : POLLIN);
	if (busy >= 0 && inw == master)
		mev |= POLLOUT;
	p[n++] = (struct pollfd){mev ? master : -1, mev, 0};
	p[n++] = (struct pollfd){busy >= 0 && inw != master ? inw : -1, POLLOUT, 0};
	for (int i = 0; i < MAXC; i++) {
		struct client *c = &cl[i];
		short ev = (short)((busy < 0 && !c->closing ? POLLIN : 0) | (wants_out(c) ? POLLOUT : 0));
		p[n++] = (struct pollfd){c->fd >= 0 ? c->fd : -1, ev, 0};
	}
	return n;
}

void hf_session_events(struct pollfd *p, int n)
{
	if (!n)
		return;
	if (p[1].revents & (POLLIN | POLLHUP | POLLERR))
		read_pty();
	if (busy >= 0 && ((p[1].revents | p[2].revents) & (POLLOUT | POLLERR | POLLHUP)))
		write_input(&cl[busy]);
	for (int i = 0; i < MAXC; i++) {
		struct client *c = &cl[i];
		short r = p[3 + i].revents;
		if (c->fd < 0 || p[3 + i].fd < 0)
			continue;
		if (r & (POLLIN | POLLHUP | POLLERR))
			on_readable(c);
		if (r & POLLOUT)
			c->full = 0;
		if (c->fd >= 0 && !c->full)
			on_writable(c);
	}
	if (p[0].revents & POLLIN)
		on_accept(); /* a new client has nothing to send before its hello */
	if (receipt_due && hf_mono_now() >= receipt_due) {
		receipt_due = 0;
		hf_guardian_receipt();
	}
}

int hf_session_poll_ms(void)
{
	if (!mode)
		return -1;
	for (int i = 0; i < MAXC; i++) {
		if (cl[i].fd < 0 || !cl[i].hello || (cl[i].flags & HF_SESS_NO_OUTPUT))
			continue;
		if (mode == HF_SESS_STDIN)
			return 50; /* the workload writes the log itself */
		if (leader_done && !cl[i].exit_sent)
			return 20; /* the exit frame's time comes */
	}
	if (receipt_due) {
		int64_t ms = (receipt_due - hf_mono_now()) / NS_PER_MS;
		return ms < 0 ? 0 : (int)ms + 1;
	}
	return -1;
}

void hf_session_leader_exited(int status)
{
	if (!mode)
		return;
	if (WIFEXITED(status))
		exit_code = WEXITSTATUS(status);
	else if (WIFSIGNALED(status))
		exit_sig = WTERMSIG(status);
	if (master >= 0 && !pty_eof)
		read_pty();
	refresh_end();
	leader_done = 1;
	exit_at = hf_mono_now() + SETTLE;
}

/* hf_session_activity is the last session activity (monotonic), or now
 * while an attached client waits on a workload that waits for typing:
 * the terminal's foreground process group leader has the terminal as
 * stdin and sleeps in a terminal read, a poll or a select. */
int64_t hf_session_activity(int64_t now)
{
	if (mode != HF_SESS_TTY || pty_eof)
		return act_mono;
	int attached = 0;
	for (int i = 0; i < MAXC; i++)
		attached |= cl[i].fd >= 0 && cl[i].hello && !(cl[i].flags & (HF_SESS_NO_INPUT | HF_SESS_NO_OUTPUT));
	pid_t pg = attached ? tcgetpgrp(master) : -1;
	if (pg <= 0)
		return act_mono;
	char path[48], w[64];
	snprintf(path, sizeof path, "/proc/%d/fd/0", (int)pg);
	ssize_t l = readlink(path, w, sizeof w - 1);
	if (l <= 0 || (size_t)l != strlen(pts) || memcmp(w, pts, (size_t)l))
		return act_mono;
	snprintf(path, sizeof path, "/proc/%d/wchan", (int)pg);
	int n = hf_read_file(path, w, sizeof w);
	if (n > 0 && (!strncmp(w, "n_tty_read", 10) || !strncmp(w, "wait_woken", 10) ||
	                 !strncmp(w, "do_select", 9) || !strncmp(w, "poll_schedule_timeout", 21)))
		return now;
	return act_mono;
}

/* hf_session_end: the tree is gone. In two rounds of at most 2 s each:
 * what the pty still holds goes to the log (its last bytes may still be on
 * their way: wait for EIO), then clients get the rest and the exit frame. */
void hf_session_end(void)
{
	if (!mode)
		return;
	if (!leader_done)
		hf_session_leader_exited(0);
	close(lsock);
	unlinkat(HF_FD_DIR, SOCK_NAME, 0);
	for (int round = 0; round < 2; round++) {
		int64_t until = hf_mono_now() + 2000 * NS_PER_MS, left;
		while ((left = (until - hf_mono_now()) / NS_PER_MS) > 0) {
			struct pollfd p[MAXC + 1];
			int n = 0;
			for (int i = 0; i < MAXC; i++) {
				if (round && cl[i].fd >= 0 && !wants_out(&cl[i]))
					drop(&cl[i]);
				p[i] = (struct pollfd){round ? cl[i].fd : -1, POLLOUT, 0};
				n += p[i].fd >= 0;
			}
			p[MAXC] = (struct pollfd){round || pty_eof ? -1 : master, POLLIN, 0};
			if ((!n && p[MAXC].fd < 0) || poll(p, MAXC + 1, (int)left) < 0)
				break;
			if (p[MAXC].revents)
				read_pty();
			for (int i = 0; i < MAXC; i++)
				if (cl[i].fd >= 0 && p[i].revents) {
					cl[i].full = 0;
					on_writable(&cl[i]);
				}
		}
		pty_eof = 1;
	}
	for (int i = 0; i < MAXC; i++)
		if (cl[i].fd >= 0)
			drop(&cl[i]);
}
