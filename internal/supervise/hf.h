/*
 * The ABI of hostfork's two C helper processes — the guardian (one per
 * command) and the keeper (one per environment with a view) — shared by
 * their C files and checked against the Go side (protocol.go) at compile
 * time by helpers_cgo.go. The protocols are documented in protocol.go and
 * keeper.go. Every C file is compiled with _GNU_SOURCE defined
 * (helpers_cgo.go's CFLAGS).
 */
#ifndef HOSTFORK_HF_H
#define HOSTFORK_HF_H

#include <signal.h>
#include <stdint.h>
#include <sys/types.h>

/* argv[1] that selects a helper (supervise.GuardianMode, KeeperMode). */
#define HF_GUARDIAN_MODE "__hostfork_guardian"
#define HF_KEEPER_MODE "__hostfork_keeper"

/* Descriptor numbers in the guardian (protocol.go, fd*) and the keeper
 * (keeper.go, kfd*). */
enum { HF_FD_CONTROL = 3, HF_FD_EVENTS, HF_FD_RECEIPT, HF_FD_STDIN, HF_FD_STDOUT, HF_FD_STDERR,
	HF_FD_FWDOUT, HF_FD_FWDERR, HF_FD_DIR, HF_FD_PARENT };
enum { HF_KFD_CONFIG = 3, HF_KFD_READY, HF_KFD_OWNER, HF_KFD_RUNDIR };

/* Control messages after the release (protocol.go, msg*). */
#define HF_MSG_SIGNAL 's'
#define HF_MSG_STOP 't'

/*
 * A moved deadline (hostfork extend; protocol.go, DeadlineFile): the mover
 * atomically replaces RUN_DIR/HF_DEADLINE_FILE (decimal CLOCK_MONOTONIC
 * nanoseconds), then sends HF_SIG_DEADLINE to the keeper and to every
 * guardian, which read the file again. SIGURG is ignored by default, so a
 * poke that reaches a guardian before it blocks the signal is harmless: it
 * reads the file at its release anyway.
 */
#define HF_DEADLINE_FILE "deadline"
#define HF_SIG_DEADLINE SIGURG
/* hf_read_deadline takes a moved deadline: a deadline file's value, when
 * it holds one, replaces *deadline. */
void hf_read_deadline(int dirfd, const char *path, int64_t *deadline);

/* Limits the launcher checks before release (protocol.go, max*). */
#define HF_MAX_ID 255        /* command_id, env_id, boot_id */
#define HF_MAX_PATH 4095     /* cgroup paths */
#define HF_MAX_RELEASE (16 << 20) /* whole release message */
#define HF_MAX_JOIN 8        /* v1_join entries */

/*
 * A stop request carried by a queued SIGTERM (pidfd_send_signal with
 * si_code SI_QUEUE): si_int holds the reason code in bits 0-7, HF_STOP_NOTICE
 * in bit 8 (the sender stops the tree itself; the guardian only records the
 * reason and arms a backup kill) and the grace in units of 10 ms in bits
 * 9-31 (protocol.go, StopSignal).
 */
#define HF_STOP_NOTICE (1 << 8)
#define HF_GRACE_SHIFT 9
/* Stop reasons (protocol.go, reasonCodes). */
enum { HF_R_NONE, HF_R_USER, HF_R_DEADLINE, HF_R_IDLE, HF_R_OWNER_EXIT, HF_R_TIMEOUT, HF_R_CANCELLED,
	HF_R_COMPLETED, HF_R_KEEPER_LOST, HF_R_LIMIT, HF_R_ABANDONED, HF_R_MAX = HF_R_ABANDONED };

/* ---- common helpers (hf_common.c) ---- */
#define NS_PER_MS 1000000LL
int64_t hf_mono_now(void);
/* hf_helper_start blocks SIGTERM, HF_SIG_DEADLINE (and SIGCHLD with
 * chld) for a signalfd on mask, ignores the signals of a terminal or a
 * gone reader, makes descriptors 3 to last close-on-exec, and keeps the
 * inherited oom_score_adj in hf_oom_adj (the workload gets it back).
 * No system call of the helpers returns EINTR (signal(7)): they install
 * no handler and run before the Go runtime, and a stop (SIGSTOP, then
 * SIGCONT) restarts what they call. It would not restart epoll_wait,
 * sigtimedwait or a socket call under SO_RCVTIMEO/SO_SNDTIMEO: the
 * helpers use none of them (poll, signalfd and non-blocking sockets). */
void hf_helper_start(sigset_t *mask, int chld, int last);
extern char hf_oom_adj[16];
int hf_write_all(int fd, const char *p, size_t n); /* 0, or -1 with errno */
/* hf_arm_timer sets timerfd tfd to CLOCK_MONOTONIC time at (INT64_MAX:
 * disarmed). */
int hf_arm_timer(int tfd, int64_t at);
void hf_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
extern int hf_log_dirfd; /* guardian: create guardian.log here on first use */
const char *hf_errstr(int err);
int hf_read_file(const char *path, char *buf, size_t cap);
int hf_write_file(const char *path, const char *val);
int hf_parse_i64(const char *s, int64_t *out);
struct hf_stat { /* in sscanf's types */
	char state;
	int ppid;
	unsigned flags;
	int threads;
	unsigned long long start;
};
int hf_read_stat(pid_t pid, struct hf_stat *st);
/* A key of a message and where its value goes: 's' copied into dst (arg
 * bytes), 'p' pointed to, 'f' a flag set when the value is eq, 'i' an
 * int64 (between 0 and arg when arg is not 0), 'v' added to the hf_vec
 * dst (a repeated key; at most arg values when arg is not 0). */
struct hf_key {
	const char *name;
	char kind;
	void *dst;
	size_t arg;
	const char *eq;
};
struct hf_vec {
	char **v; /* room for every value and a NULL after them */
	size_t n;
};
int hf_set_key(const struct hf_key *keys, const char *key, char *val);

/* A length-framed message (protocol.go): its length (uint32, native byte
 * order), then that many bytes of "key=value\0" strings. */
struct hf_msg {
	char *buf;  /* the mapping: the message, NUL-terminated */
	size_t map; /* its size */
	size_t len; /* bytes of the message proper */
};
/* hf_read_msg reads one message from fd: 1 read, 0 EOF first, -1 bad. */
int hf_read_msg(int fd, struct hf_msg *m);
/* hf_parse_msg stores each "key=value" string of m as keys say. fn, when
 * not NULL, sees each key first: it returns 1 when it took the key (it may
 * move *next past strings that follow it), 0 when the table is to, -1 for
 * a bad value. It returns 0, or -1 for a bad or unknown entry. */
int hf_parse_msg(struct hf_msg *m, const struct hf_key *keys, int (*fn)(char *key, char *val, char **next));
void hf_free_msg(struct hf_msg *m);

/* A line reader: hf_read_lines reads what fd holds and calls fn with each
 * whole line, its newline cut (a line longer than buf is dropped). It
 * returns -1 at EOF or on an error, else 0. */
struct hf_lines {
	char buf[2 * HF_MAX_PATH + 64];
	size_t len;
	int overflow;
};
int hf_read_lines(int fd, struct hf_lines *l, void (*fn)(char *line));

/* ---- the tree stop (hf_tree.c; internal/tree has the same rules) ---- */
#define HF_MAX_ROOTS 1024
#define HF_MAX_MEMBERS 65536
struct hf_tree {
	/* The cgroup2 subtree whose processes are members ("" none) and the
	 * cgroup2 mount it lies under (to read /proc/PID/cgroup). */
	char cgroup[HF_MAX_PATH + 1];
	char mount[HF_MAX_PATH + 1];
	/* The live descendants of these subreapers are members too (the roots
	 * themselves are not). */
	pid_t roots[HF_MAX_ROOTS];
	int nroots;
	/* The last kill: membership outside the cgroup was stable before it,
	 * and this many members were outside the cgroup. */
	int stable, outsiders;
};
/* hf_tree_list lists the members into out (at most max), sorted, and
 * returns how many it listed. */
int hf_tree_list(struct hf_tree *t, pid_t *out, int max);
/* hf_tree_signal sends sig to every member through a pidfd, re-checking
 * membership after the open. */
void hf_tree_signal(struct hf_tree *t, int sig);
/* hf_tree_kill writes cgroup.kill, stops (SIGSTOP) the members outside
 * the cgroup until two listings agree and SIGKILLs them; returns the
 * number of members it found. */
int hf_tree_kill(struct hf_tree *t);
/* hf_tree_populated reports whether any member remains. */
int hf_tree_populated(struct hf_tree *t);
/* hf_queue_stop sends a queued SIGTERM stop request (see HF_STOP_NOTICE). */
int hf_queue_stop(int pidfd, int reason, int notice, int64_t grace_ns);
/* hf_stop_guardians queues a stop to every process of the guardians group
 * (but skip), each checked through a pidfd to be in the group, and adds
 * them to roots (when not NULL). */
void hf_stop_guardians(const char *mount, const char *group, pid_t skip, int reason, int64_t grace, struct hf_tree *roots);

/* ---- the session loop (hf_session.c; docs/sessions.md) ---- */
#define HF_SESS_TTY 1
#define HF_SESS_STDIN 2
#define HF_SESS_NO_INPUT 1  /* hello flags */
#define HF_SESS_NO_OUTPUT 2
#define HF_SESS_MAXC 16
#define HF_SESS_IN_MAX (16 << 10)
struct pollfd;
/* The release's session keys (guardian.c's table): session=tty|stdin and
 * the terminal's size. */
extern int hf_sess_tty, hf_sess_stdin;
extern int64_t hf_sess_cols, hf_sess_rows;
int hf_session_setup(int *in, int *out, int *err, char *msg, size_t cap);
int hf_session_child(void);
int hf_session_pollfds(struct pollfd *p, int max);
void hf_session_events(struct pollfd *p, int n);
int hf_session_poll_ms(void);
void hf_session_leader_exited(int status);
int64_t hf_session_activity(int64_t now);
/* The last input and output (CLOCK_REALTIME; zero: none), for the receipt. */
extern struct timespec hf_sess_last_in, hf_sess_last_out;
void hf_session_end(void);
/* guardian.c, for the session loop: rewrite the receipt; the output
 * files were cut (a write failed). */
void hf_guardian_receipt(void);
extern int hf_output_truncated;

int hf_guardian_main(void);
int hf_keeper_main(void);

#endif
