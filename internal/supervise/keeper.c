/*
 * The keeper: one small process per environment with a view (and, in the
 * systemd-scope tier, the scope's anchor). It holds the environment's mount
 * namespace while commands come and go, watches the owner channel and the
 * deadline, and stops the environment's commands when the policy says so —
 * by asking each command's guardian to stop its tree (a queued SIGTERM with
 * the reason), then killing what is left with the shared tree-stop
 * mechanism (hf_tree.c). It is a hidden mode of every binary that links
 * package supervise (hf_ctor.c), in C like the guardian, so it starts
 * without the Go runtime. The protocol is documented in keeper.go.
 */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "hf.h"

/* The mount API's flags and mount_setattr's argument (linux/mount.h,
 * which glibc before 2.36 can't include beside sys/mount.h). */
#define HF_OPEN_TREE_CLONE 1
#define HF_AT_RECURSIVE 0x8000
#define HF_MOVE_MOUNT_F_EMPTY_PATH 0x00000004
#define HF_MOVE_MOUNT_T_EMPTY_PATH 0x00000040
#define HF_AT_EMPTY_PATH 0x1000
#define HF_MOUNT_ATTR_RDONLY 0x00000001

struct hf_mount_attr {
	uint64_t attr_set, attr_clr, propagation, userns_fd;
};

#define MAX_OPS 512
#define MAX_SLOTS 64

enum { OP_MOUNT = 1, OP_REMOUNT, OP_RDONLY, OP_TMPFS, OP_MKDIRS, OP_CAPTURE, OP_MKPOINT, OP_MOVE, OP_RDONLY_ONE };

static struct op {
	int kind;
	const char *source, *target, *fstype, *data;
	unsigned long flags;
	int slot;
} ops[MAX_OPS];
static int nops;
static int slots[MAX_SLOTS];

static struct {
	char env_id[HF_MAX_ID + 1];
	char guardians[HF_MAX_PATH + 1];
	int owner_stop, slave;
	int userns; /* a user namespace first: a rootless view (keeper.go) */
	int files; /* trees' descriptors handed over, from HF_KFD_RUNDIR + 1 */
	int64_t deadline_ns, grace_ns;
} kc;
/* The environment's commands group (and the cgroup2 mount), stopped as one tree. */
static struct hf_tree commands;

static struct hf_msg cfgmsg;
static char errmsg[2048];

/* kerr keeps the error of building the view, for refuse; it returns -1. */
__attribute__((format(printf, 1, 2))) static int kerr(const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(errmsg, sizeof errmsg, fmt, ap);
	va_end(ap);
	return -1;
}

/* op_key takes "op=KIND", then always six strings: target, source, fstype,
 * data, flags and slot (keeper.go, encodeKeeper). The mapping is zeroed
 * past the message, so a short one ends past its end. */
static int op_key(char *key, char *val, char **next)
{
	static const char *kinds[] = {"", "mount", "remount", "rdonly", "tmpfs", "mkdirs", "capture", "mkpoint", "move", "rdonly-one", NULL};
	if (strcmp(key, "op"))
		return 0;
	char *f[6];
	for (int j = 0; j < 6; j++) {
		f[j] = *next;
		*next += strlen(*next) + 1;
	}
	int64_t fl, sl;
	if (*next > cfgmsg.buf + cfgmsg.len || nops >= MAX_OPS || f[0][0] != '/' || hf_parse_i64(f[4], &fl) < 0 || fl < 0 ||
	    hf_parse_i64(f[5], &sl) < 0 || sl < 0 || sl >= MAX_SLOTS)
		return -1;
	struct op *o = &ops[nops++];
	*o = (struct op){0, f[1], f[0], f[2], f[3], (unsigned long)fl, (int)sl};
	for (int k = 1; kinds[k] && !o->kind; k++)
		o->kind = strcmp(val, kinds[k]) ? 0 : k;
	return o->kind ? 1 : -1;
}

static int parse_config(struct hf_msg *m)
{
	static int64_t files;
	static const struct hf_key keys[] = {
		{"env_id", 's', kc.env_id, sizeof kc.env_id, 0},
		{"cgroup_mount", 's', commands.mount, sizeof commands.mount, 0},
		{"commands_cgroup", 's', commands.cgroup, sizeof commands.cgroup, 0},
		{"guardians_cgroup", 's', kc.guardians, sizeof kc.guardians, 0},
		{"owner_exit", 'f', &kc.owner_stop, 0, "stop"},
		{"propagation", 'f', &kc.slave, 0, "slave"},
		{"userns", 'f', &kc.userns, 0, "1"},
		{"deadline_mono_ns", 'i', &kc.deadline_ns, 0, 0},
		{"grace_ns", 'i', &kc.grace_ns, 0, 0},
		{"files", 'i', &files, 256, 0},
		{0, 0, 0, 0, 0},
	};
	int r = hf_parse_msg(m, keys, op_key);
	kc.files = (int)files;
	return r;
}

/* nofollow opens path beneath dir (AT_FDCWD: absolute) as an O_PATH
 * descriptor without following any symbolic link, magic links included,
 * in any component (RESOLVE_NO_SYMLINKS). */
static int nofollow(int dir, const char *path, int flags)
{
	struct open_how how = {.flags = (uint64_t)(O_PATH | O_CLOEXEC | flags), .resolve = RESOLVE_NO_SYMLINKS};
	return (int)syscall(SYS_openat2, dir, path, &how, sizeof how);
}

/* pin_files re-opens each handed-over tree descriptor inside the view's
 * mount namespace: a mount made here must name objects on this
 * namespace's mounts (overlayfs clones its upper privately and refuses
 * another namespace's), yet must be the very directories the launcher
 * verified. So each is looked up again where the kernel says it is now,
 * without following any symbolic link, and kept only if it is the same
 * object (device and inode) as the descriptor; it then takes that
 * descriptor's number, which the view's operations name as
 * /proc/self/fd/N. */
static int pin_files(void)
{
	for (int i = 0; i < kc.files; i++) {
		int fd = HF_KFD_RUNDIR + 1 + i;
		char link[64], path[HF_MAX_PATH];
		snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
		ssize_t n = readlink(link, path, sizeof path - 1);
		if (n <= 0 || path[0] != '/')
			return kerr("view: tree descriptor %d: %s", fd, n < 0 ? hf_errstr(errno) : "not a path");
		path[n] = 0;
		int nfd = nofollow(AT_FDCWD, path, O_DIRECTORY);
		if (nfd < 0)
			return kerr("view: tree %.1900s: %s", path, hf_errstr(errno));
		struct stat a, b;
		int same = fstat(fd, &a) == 0 && fstat(nfd, &b) == 0 && a.st_dev == b.st_dev && a.st_ino == b.st_ino;
		int r = same ? dup3(nfd, fd, O_CLOEXEC) : -1, e = errno;
		close(nfd);
		if (!same)
			return kerr("view: tree %.1900s is no longer the directory the launcher verified", path);
		if (r < 0)
			return kerr("view: tree %.1900s: %s", path, hf_errstr(e));
	}
	return 0;
}

static int fail_op(const char *what, const char *target)
{
	if (errno == ELOOP)
		return kerr("view: %s %s: a component is a symbolic link, which hostfork never follows to a mount target; name the real path", what, target);
	return kerr("view: %s %s: %s", what, target, hf_errstr(errno));
}

/* resolve opens path (absolute) in this mount namespace with nofollow: the
 * planner resolved every target on the host by descriptors, so a link here
 * is one planted since (DESIGN.md, "Trust model": both sides of every
 * mount). Mounts then name the descriptor, never the path again. With mk,
 * missing directories on the way are made (mode 0755), each relative to
 * its opened parent. */
static int resolve(const char *path, int mk)
{
	if (!mk)
		return nofollow(AT_FDCWD, path, 0);
	char p[PATH_MAX];
	if (snprintf(p, sizeof p, "%s", path) >= (int)sizeof p) {
		errno = ENAMETOOLONG;
		return -1;
	}
	int fd = nofollow(AT_FDCWD, "/", 0);
	for (char *c = p + 1, *next; fd >= 0 && *c; c = next) {
		next = c + strcspn(c, "/");
		if (*next)
			*next++ = 0;
		if (!*c)
			continue;
		int nfd = mkdirat(fd, c, 0755) < 0 && errno != EEXIST ? -1 : nofollow(fd, c, 0);
		int e = errno;
		close(fd);
		errno = e;
		fd = nfd;
	}
	return fd;
}

/* fdpath names descriptor fd as a path that mount(2) follows to exactly
 * that object. */
static const char *fdpath(char b[32], int fd)
{
	snprintf(b, 32, "/proc/self/fd/%d", fd);
	return b;
}

/* mkpoint creates target when it is missing, as a directory or an empty
 * file like the mount captured in fd. A restored share lies under a
 * covering rule, so a missing target is missing from a private layer (an
 * empty scratch, a tree without that path) and is created there, never on
 * the host; its parent is reached by descriptors like any target. */
static int mkpoint(int fd, const char *target)
{
	struct stat st;
	char parent[PATH_MAX];
	int t = resolve(target, 0);
	if (t >= 0)
		return close(t);
	if (errno != ENOENT)
		return -1;
	/* The parent keeps its final slash ("/a/b/" resolves as "/a/b"). */
	const char *name = strrchr(target, '/') + 1; /* absolute: parse_config */
	if (fstat(fd, &st) < 0 || snprintf(parent, sizeof parent, "%s", target) >= (int)sizeof parent)
		return -1;
	parent[name - target] = 0;
	int dir = resolve(parent, 1);
	if (dir < 0)
		return -1;
	int r;
	if (S_ISDIR(st.st_mode))
		r = mkdirat(dir, name, st.st_mode & 07777);
	else if ((r = openat(dir, name, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC | O_NOFOLLOW, 0600)) >= 0)
		r = close(r);
	int e = errno;
	close(dir);
	errno = e;
	return r < 0 ? -1 : 0;
}

/* source_of returns the path mount(2) gets as a bind's source: the
 * launcher's tree descriptors (/proc/self/fd/N, pinned above) as they
 * are; a host path resolved like a target, into *fd. */
static const char *source_of(const char *src, int *fd, char b[32])
{
	if (!src || !src[0])
		return NULL;
	if (src[0] != '/' || !strncmp(src, "/proc/self/fd/", 14))
		return src;
	if ((*fd = resolve(src, 0)) < 0)
		return NULL;
	return fdpath(b, *fd);
}

static int apply_op(struct op *o)
{
	char tb[32], sb[32];
	int sfd = -1, r = 0;
	if (o->kind == OP_MKDIRS) {
		int t = resolve(o->target, 1);
		if (t < 0)
			return fail_op("creating mount point", o->target);
		close(t);
		return 0;
	}
	if (o->kind == OP_MKPOINT)
		return mkpoint(slots[o->slot], o->target) < 0 ? fail_op("creating mount point", o->target) : 0;
	int t = resolve(o->target, 0);
	if (t < 0)
		return fail_op("opening", o->target);
	const char *target = fdpath(tb, t);
	switch (o->kind) {
	case OP_MOUNT: {
		const char *src = o->source && o->source[0] ? o->source : NULL;
		if ((o->flags & MS_BIND) && !(src = source_of(o->source, &sfd, sb))) {
			r = fail_op("opening", o->source ? o->source : "(no source)");
			break;
		}
		if (mount(src, target, o->fstype && o->fstype[0] ? o->fstype : NULL, o->flags, o->data && o->data[0] ? o->data : NULL) < 0)
			r = fail_op("mount", o->target);
		break;
	}
	case OP_REMOUNT:
		if (mount(NULL, target, NULL, MS_REMOUNT | MS_BIND | o->flags, NULL) < 0)
			r = fail_op("remount", o->target);
		break;
	case OP_RDONLY:
	case OP_RDONLY_ONE: {
		/* rdonly-one: the one mount at target, not those below it. */
		struct hf_mount_attr a = {HF_MOUNT_ATTR_RDONLY, 0, 0, 0};
		unsigned rec = o->kind == OP_RDONLY ? HF_AT_RECURSIVE : 0;
		if (syscall(SYS_mount_setattr, t, "", HF_AT_EMPTY_PATH | rec, &a, sizeof a) < 0)
			r = fail_op("read-only", o->target);
		break;
	}
	case OP_TMPFS: {
		struct stat st;
		unsigned mode = 01777;
		if (fstat(t, &st) == 0)
			mode = st.st_mode & 07777;
		char data[32];
		snprintf(data, sizeof data, "mode=%o", mode);
		if (mount("tmpfs", target, "tmpfs", MS_NOSUID | MS_NODEV, data) < 0)
			r = fail_op("tmpfs", o->target);
		break;
	}
	case OP_CAPTURE: {
		int fd = (int)syscall(SYS_open_tree, t, "", HF_OPEN_TREE_CLONE | O_CLOEXEC | HF_AT_RECURSIVE | HF_AT_EMPTY_PATH);
		if (fd < 0)
			r = fail_op("open_tree", o->target);
		else
			slots[o->slot] = fd;
		break;
	}
	case OP_MOVE:
		if (syscall(SYS_move_mount, slots[o->slot], "", t, "", HF_MOVE_MOUNT_F_EMPTY_PATH | HF_MOVE_MOUNT_T_EMPTY_PATH) < 0) {
			r = fail_op("move_mount", o->target);
			break;
		}
		close(slots[o->slot]);
		slots[o->slot] = -1;
		break;
	}
	if (sfd >= 0)
		close(sfd);
	close(t);
	return r;
}

static int apply_ops(void)
{
	for (int i = 0; i < nops; i++)
		if (apply_op(&ops[i]) < 0)
			return -1;
	return 0;
}

/* ready reports "ok", or "error MESSAGE" (keeper.go), on the ready
 * channel: one line (b holds the longest: a prefix and errmsg). It
 * returns 125, the keeper's exit code after an error. */
static int ready(const char *prefix, const char *msg)
{
	char b[2200];
	int n = snprintf(b, sizeof b, "%s%s\n", prefix, msg);
	hf_write_all(HF_KFD_READY, b, (size_t)n);
	return 125;
}


/* stop_commands ends every command of the environment: each guardian is
 * asked to stop its tree with the reason and the grace (its receipt then
 * carries the reason); what is left after the grace is killed. */
static void stop_commands(int reason, int64_t grace)
{
	struct hf_tree *t = &commands; /* called once: the keeper exits after it */
	if (!t->cgroup[0])
		return;
	if (kc.guardians[0])
		hf_stop_guardians(t->mount, kc.guardians, 0, reason, grace, t);
	/* Every 10 ms: has the tree gone? After the grace and 1 s more, a
	 * kill round each time, at most 200 (2 s). */
	int64_t end = hf_mono_now() + grace + 1000 * NS_PER_MS;
	for (int kills = 0; kills < 200 && hf_tree_populated(t);) {
		if (hf_mono_now() >= end) {
			hf_tree_kill(t);
			kills++;
		}
		usleep(10 * 1000);
	}
}

/* arm_deadline arms the deadline timer at deadline − grace, after taking a
 * moved deadline (hf.h, HF_DEADLINE_FILE) from the run directory the
 * launcher opened on the host's mounts (HF_KFD_RUNDIR; /dev/null when there
 * is none, so the slot is never reused). Re-arming discards an expiry not yet read. */
static void arm_deadline(int tfd)
{
	hf_read_deadline(HF_KFD_RUNDIR, HF_DEADLINE_FILE, &kc.deadline_ns);
	if (kc.deadline_ns > 0)
		hf_arm_timer(tfd, kc.deadline_ns - kc.grace_ns);
}

/* The owner channel. The creator first writes "committed" once the
 * registry holds our identity (optionally followed by the commands and
 * guardians groups, known only then in the systemd tier); EOF before that
 * is an aborted creation, EOF after it means the creator is gone. */
static int committed;

static void owner_line(char *line)
{
	if (strncmp(line, "committed", 9))
		return;
	committed = 1;
	/* The groups: at most HF_MAX_PATH (4095) bytes each, as Commit checks. */
	sscanf(line + 9, "%4095s %4095s", commands.cgroup, kc.guardians);
}

int hf_keeper_main(void)
{
	sigset_t mask;
	hf_helper_start(&mask, 0, HF_KFD_RUNDIR);
	for (int i = 0; i < MAX_SLOTS; i++)
		slots[i] = -1;
	if (hf_read_msg(HF_KFD_CONFIG, &cfgmsg) <= 0 || parse_config(&cfgmsg) < 0)
		return ready("error ", "reading the keeper's configuration");
	/* A rootless view: a user namespace of our own, in which we hold
	 * every capability, whose id maps the launcher writes from outside
	 * (only a process in the parent namespace may, and newuidmap needs
	 * one); it says "userns", writes the maps, and answers 'm' on the
	 * configuration pipe. The mount namespace made next belongs to it. */
	if (kc.userns) {
		if (unshare(CLONE_NEWUSER) < 0) {
			kerr("a user namespace: unshare: %s", hf_errstr(errno));
			return ready("error ", errmsg);
		}
		ready("userns", "");
		char c = 0;
		if (read(HF_KFD_CONFIG, &c, 1) != 1 || c != 'm')
			return 125; /* the launcher could not map our ids: it says why */
	}
	close(HF_KFD_CONFIG);
	/* A private mount namespace, from which nothing made in the view may
	 * propagate back to the host. A recursive slave still receives the
	 * host's own mounts and unmounts on every shared host mount; private
	 * ones stay private. */
	int applied = unshare(CLONE_NEWNS) < 0 ? kerr("a private mount namespace: unshare: %s", hf_errstr(errno))
	    : mount(NULL, "/", NULL, MS_REC | (kc.slave ? MS_SLAVE : MS_PRIVATE), NULL) < 0
	    ? kerr("making the view %s: %s", kc.slave ? "a slave" : "private", hf_errstr(errno))
	    : pin_files() < 0 ? -1 : apply_ops();
	/* The trees' descriptors (KeeperSpec.Files, from fd 7 on) were only
	 * for building the view (closed one by one: close_range takes 5.9). */
	for (int i = 0; i < kc.files; i++)
		close(HF_KFD_RUNDIR + 1 + i);
	if (applied < 0)
		return ready("error ", errmsg);
	hf_free_msg(&cfgmsg);
	ready("ok", "");
	close(HF_KFD_READY);
	if (chdir("/") < 0)
		hf_log("keeper: chdir /: %s", hf_errstr(errno));

	int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
	int tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	arm_deadline(tfd);
	int owner_open = 1;
	static struct hf_lines owner;
	for (;;) {
		struct pollfd pfd[3] = {{sfd, POLLIN, 0}, {tfd, POLLIN, 0}, {owner_open ? HF_KFD_OWNER : -1, POLLIN, 0}};
		if (poll(pfd, 3, -1) < 0) {
			hf_log("keeper: poll: %s", hf_errstr(errno));
			continue;
		}
		if (pfd[0].revents) {
			struct signalfd_siginfo si;
			int moved = 0;
			while (read(sfd, &si, sizeof si) == (ssize_t)sizeof si) {
				if (si.ssi_signo == HF_SIG_DEADLINE) {
					moved = 1;
					continue;
				}
				if (si.ssi_code == SI_QUEUE) {
					int reason = si.ssi_int & 0xff;
					int64_t grace = (int64_t)((unsigned)si.ssi_int >> HF_GRACE_SHIFT) * 10 * NS_PER_MS;
					stop_commands(reason ? reason : HF_R_USER, grace);
				}
				/* A plain SIGTERM is an orderly environment stop: its
				 * commands are handled by the stopper. */
				return 0;
			}
			if (moved) {
				arm_deadline(tfd);
				continue; /* a timer that fired before the move is void */
			}
		}
		if (pfd[1].revents) {
			int64_t left = kc.deadline_ns - hf_mono_now();
			stop_commands(HF_R_DEADLINE, left > 0 ? left : 0);
			return 0;
		}
		if (owner_open && pfd[2].revents) {
			if (hf_read_lines(HF_KFD_OWNER, &owner, owner_line) == 0)
				continue;
			close(HF_KFD_OWNER);
			owner_open = 0;
			if (!committed)
				return 0; /* aborted creation: nothing may outlive it */
			if (kc.owner_stop) {
				stop_commands(HF_R_OWNER_EXIT, kc.grace_ns);
				return 0;
			}
		}
	}
}
