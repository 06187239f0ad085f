package supervise

import (
	"encoding/json"

	"github.com/habemus-papadum/hostfork/internal/jsonfast"
)

// The receipt and the event lines are written by the guardian in one
// shape (guardian.c: write_receipt, emit) and read by every launcher and
// reaper once or a few times per process. They are decoded without
// encoding/json's reflection (its first use of a type costs a short
// process 0.1–0.2 ms, docs/decisions.md 63); anything the fast decoders
// do not take goes to encoding/json, whose semantics hold throughout.

// receiptNoCodec and eventNoCodec are encoding/json's view of the types.
type (
	receiptNoCodec Receipt
	eventNoCodec   Event
)

func decodeReceipt(b []byte, r *Receipt) error {
	if json.Valid(b) {
		var n Receipt
		if fastReceipt(b, &n) {
			*r = n
			return nil
		}
	}
	return json.Unmarshal(b, (*receiptNoCodec)(r))
}

var receiptNames = []string{
	"command_id", "env_id", "boot_id", "guardian_pid", "proof_dev", "proof_ino", "workload_pid", "workload_start",
	"start_error", "leader_exited_at", "exit_code", "signal", "stop_reason", "stopped_by_hostfork", "outside_cgroup",
	"membership_unstable", "tree_exited_at", "output_truncated", "leader_oom", "complete",
	"leader_oom_stale_ms",
}

func fastReceipt(b []byte, r *Receipt) bool {
	set := jsonfast.Fields{Names: receiptNames}
	return jsonfast.EachMember(b, func(k string, v []byte) bool {
		i, ok := set.Field(k)
		if !ok {
			return false
		}
		switch i {
		case 0:
			return jsonfast.DecodeString(v, &r.CommandID)
		case 1:
			return jsonfast.DecodeString(v, &r.EnvID)
		case 2:
			return jsonfast.DecodeString(v, &r.BootID)
		case 3:
			return jsonfast.DecodeIntValue(v, &r.Guardian)
		case 4:
			return jsonfast.DecodeUint(v, &r.ProofDev)
		case 5:
			return jsonfast.DecodeUint(v, &r.ProofIno)
		case 6:
			return jsonfast.DecodeIntValue(v, &r.WorkloadPID)
		case 7:
			return jsonfast.DecodeUint(v, &r.WorkloadStart)
		case 8:
			return jsonfast.DecodeString(v, &r.StartError)
		case 9:
			return jsonfast.DecodeTimePtr(v, &r.LeaderExited)
		case 10:
			return jsonfast.DecodeIntPtr(v, &r.ExitCode)
		case 11:
			return jsonfast.DecodeIntPtr(v, &r.Signal)
		case 12:
			return jsonfast.DecodeString(v, (*string)(&r.StopReason))
		case 13:
			return jsonfast.DecodeBool(v, &r.StoppedByHostfork)
		case 14:
			return jsonfast.DecodeIntValue(v, &r.OutsideCgroup)
		case 15:
			return jsonfast.DecodeBool(v, &r.MembershipUnstable)
		case 16:
			return jsonfast.DecodeTimePtr(v, &r.TreeExited)
		case 17:
			return jsonfast.DecodeBool(v, &r.OutputTruncated)
		case 18:
			return jsonfast.DecodeBoolPtr(v, &r.LeaderOOM)
		case 19:
			return jsonfast.DecodeBool(v, &r.Complete)
		case 20:
			return jsonfast.DecodeInt(v, &r.LeaderOOMStaleMS)
		}
		return true
	})
}

// decodeEvent parses one event line.
func decodeEvent(line []byte) (Event, error) {
	if json.Valid(line) {
		var ev Event
		if fastEvent(line, &ev) {
			return ev, nil
		}
	}
	var ev Event
	err := json.Unmarshal(line, (*eventNoCodec)(&ev))
	return ev, err
}

var eventNames = []string{"ev", "pid", "start", "code", "signal", "reason", "error", "at"}

func fastEvent(b []byte, ev *Event) bool {
	set := jsonfast.Fields{Names: eventNames}
	return jsonfast.EachMember(b, func(k string, v []byte) bool {
		i, ok := set.Field(k)
		if !ok {
			return false
		}
		switch i {
		case 0:
			return jsonfast.DecodeString(v, &ev.Kind)
		case 1:
			return jsonfast.DecodeIntValue(v, &ev.PID)
		case 2:
			return jsonfast.DecodeUint(v, &ev.StartTime)
		case 3:
			return jsonfast.DecodeIntPtr(v, &ev.ExitCode)
		case 4:
			return jsonfast.DecodeIntPtr(v, &ev.Signal)
		case 5:
			return jsonfast.DecodeString(v, (*string)(&ev.Reason))
		case 6:
			return jsonfast.DecodeString(v, &ev.Error)
		case 7:
			return jsonfast.DecodeTime(v, &ev.At)
		}
		return true
	})
}
