/*
 * The guardian's ABI, shared by guardian.c and the cgo preamble of
 * guardian_cgo.go, which checks it against protocol.go at compile time.
 * The protocol itself is documented in protocol.go.
 */
#ifndef HOSTFORK_GUARDIAN_H
#define HOSTFORK_GUARDIAN_H

/* argv[1] that selects the guardian (supervise.GuardianMode). */
#define HF_GUARDIAN_MODE "__hostfork_guardian"

/* Descriptor numbers in the guardian (protocol.go, fd*). */
#define HF_FD_CONTROL 3
#define HF_FD_EVENTS 4
#define HF_FD_RECEIPT 5
#define HF_FD_STDIN 6
#define HF_FD_STDOUT 7
#define HF_FD_STDERR 8
#define HF_FD_FWDOUT 9
#define HF_FD_FWDERR 10

/* Control messages (protocol.go, msg*). */
#define HF_MSG_RELEASE 'R'
#define HF_MSG_SIGNAL 's'
#define HF_MSG_STOP 't'

/* Limits the launcher checks before release (protocol.go, max*). */
#define HF_MAX_ID 255        /* command_id, env_id */
#define HF_MAX_PATH 4095     /* workload_cgroup, owner_exit, output */
#define HF_MAX_REASON 255    /* stop reasons */
#define HF_MAX_RELEASE (16 << 20) /* whole release message (execve takes at most 6 MiB) */

/* Exposed for the Go-side consistency test. */
const char *hf_guardian_mode(void);

#endif
