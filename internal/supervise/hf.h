/*
 * The ABI of hostfork's two C helper processes — the guardian (one per
 * command) and the keeper (one per environment with a view) — shared by
 * their C files and checked against the Go side (protocol.go) at compile
 * time by helpers_cgo.go. The protocols are documented in protocol.go and
 * keeper.go.
 */
#ifndef HOSTFORK_HF_H
#define HOSTFORK_HF_H

#include <stdint.h>
#include <sys/types.h>

/* argv[1] that selects a helper (supervise.GuardianMode, KeeperMode). */
#define HF_GUARDIAN_MODE "__hostfork_guardian"
#define HF_KEEPER_MODE "__hostfork_keeper"

/* Descriptor numbers in the guardian (protocol.go, fd*). */
#define HF_FD_CONTROL 3
#define HF_FD_EVENTS 4
#define HF_FD_RECEIPT 5
#define HF_FD_STDIN 6
#define HF_FD_STDOUT 7
#define HF_FD_STDERR 8
#define HF_FD_FWDOUT 9
#define HF_FD_FWDERR 10
#define HF_FD_DIR 11
#define HF_FD_PARENT 12

/* Descriptor numbers in the keeper (keeper.go, kfd*). */
#define HF_KFD_CONFIG 3
#define HF_KFD_READY 4
#define HF_KFD_OWNER 5

/* Control messages (protocol.go, msg*). */
#define HF_MSG_RELEASE 'R'
#define HF_MSG_SIGNAL 's'
#define HF_MSG_STOP 't'

/* Limits the launcher checks before release (protocol.go, max*). */
#define HF_MAX_ID 255        /* command_id, env_id */
#define HF_MAX_PATH 4095     /* cgroup paths */
#define HF_MAX_REASON 255    /* stop reasons */
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
enum {
	HF_R_NONE = 0,
	HF_R_USER = 1,
	HF_R_DEADLINE = 2,
	HF_R_IDLE = 3,
	HF_R_OWNER_EXIT = 4,
	HF_R_TIMEOUT = 5,
	HF_R_CANCELLED = 6,
	HF_R_COMPLETED = 7,
	HF_R_KEEPER_LOST = 8,
	HF_R_LIMIT = 9,
	HF_R_ABANDONED = 10,
	HF_R_MAX = 10,
};
const char *hf_reason_name(int code);
int hf_reason_code(const char *name);

/* Exposed for the Go-side consistency test. */
const char *hf_guardian_mode(void);

/* ---- common helpers (hf_common.c) ---- */
#define NS_PER_MS 1000000LL
int64_t hf_mono_now(void);
void hf_write_all(int fd, const char *p, size_t n);
void hf_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void hf_log_to(int fd);
extern int hf_log_dirfd; /* guardian: create guardian.log here on first use */
const char *hf_errstr(int err);
int hf_read_file(const char *path, char *buf, size_t cap);
int hf_read_fileat(int dirfd, const char *path, char *buf, size_t cap);
int hf_write_fileat(int dirfd, const char *path, const char *val);
int hf_parse_i64(const char *s, int64_t *out);
int hf_read_stat(pid_t pid, char *state, pid_t *ppid, uint64_t *start);
int hf_read_stat_full(pid_t pid, char *state, pid_t *ppid, int *threads, uint64_t *start);
int hf_copy_bounded(char *dst, size_t cap, const char *src);

/* A NUL-framed message: 'R' then "key=value\0" strings, ended by "\0". */
struct hf_msg {
	char *buf;      /* the mapping */
	size_t map;     /* its size */
	size_t len;     /* bytes of the message proper */
	char extra[4096]; /* bytes that followed the message */
	size_t nextra;
};
/* hf_read_msg reads one message from fd: 1 read, 0 EOF first, -1 bad. */
int hf_read_msg(int fd, struct hf_msg *m);
void hf_free_msg(struct hf_msg *m);

/* JSON writing into a fixed buffer. */
struct hf_sb {
	char *p;
	size_t len, cap;
};
void hf_sb_raw(struct hf_sb *b, const char *s, size_t n);
void hf_sb_s(struct hf_sb *b, const char *s);
void hf_sb_u64(struct hf_sb *b, uint64_t v);
void hf_sb_i64(struct hf_sb *b, int64_t v);
void hf_sb_str(struct hf_sb *b, const char *s, size_t max);
void hf_sb_time(struct hf_sb *b, const struct timespec *ts);

/* ---- the tree-stop mechanism (hf_tree.c; internal/tree is its Go twin) ---- */
#define HF_MAX_ROOTS 1024
#define HF_MAX_MEMBERS 65536
struct hf_tree {
	/* The cgroup2 subtree whose processes are members ("" none) and the
	 * cgroup2 mount it lies under (to read /proc/PID/cgroup). */
	char cgroup[HF_MAX_PATH + 1];
	char mount[HF_MAX_PATH + 1];
	/* The live descendants of these processes are members too (the roots
	 * themselves are not): a guardian is its tree's subreaper. */
	pid_t roots[HF_MAX_ROOTS];
	int nroots;
	/* State of one stop. */
	int froze;        /* this stop froze the cgroup */
	int stable;       /* membership was stable at the last kill */
	int outsiders;    /* members found outside the cgroup at the last kill */
};
/* hf_tree_list lists the members into out (at most max) and returns how
 * many there are. */
int hf_tree_list(struct hf_tree *t, pid_t *out, int max);
/* hf_tree_signal sends sig to every member through a pidfd, re-checking
 * membership after the open; returns the number signalled. */
int hf_tree_signal(struct hf_tree *t, int sig);
/* hf_tree_kill quiesces (freeze the cgroup, SIGSTOP members outside it),
 * lists until two listings agree (bounded), SIGKILLs every member
 * (cgroup.kill, and each member through a pidfd), then thaws what it froze.
 * Returns the number of members it killed. */
int hf_tree_kill(struct hf_tree *t);
/* hf_tree_populated reports whether any member remains. */
int hf_tree_populated(struct hf_tree *t);
/* hf_queue_stop sends a queued SIGTERM stop request (see HF_STOP_NOTICE). */
int hf_queue_stop(int pidfd, int reason, int notice, int64_t grace_ns);

/* ---- the session loop (hf_session.c; docs/sessions.md) ---- */
#define HF_SESS_TTY 1
#define HF_SESS_STDIN 2
#define HF_SESS_NO_INPUT 1  /* hello flags */
#define HF_SESS_NO_OUTPUT 2
#define HF_SESS_MAXC 16
#define HF_SESS_IN_MAX (16 << 10)
struct pollfd;
int hf_session_key(const char *k, const char *v);
int hf_session_setup(int *in, int *out, int *err, char *msg, size_t cap);
int hf_session_child(void);
void hf_session_started(void);
int hf_session_pollfds(struct pollfd *p, int max);
void hf_session_events(struct pollfd *p, int n);
int hf_session_poll_ms(void);
void hf_session_leader_exited(int status);
int64_t hf_session_activity(int64_t now);
void hf_session_times(struct timespec *in, struct timespec *out);
void hf_session_end(void);
/* guardian.c, for the session loop */
void hf_guardian_receipt(void);
void hf_guardian_truncated(void);

int hf_guardian_main(void);
int hf_keeper_main(void);

#endif
