package supervise

import (
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/habemus-papadum/hostfork/api"
)

// sealed is text followed by its end line, as the guardian writes it.
func sealed(text string) []byte {
	h := fnv.New32a()
	h.Write([]byte(text))
	return []byte(fmt.Sprintf("%send=%08x\n", text, h.Sum32()))
}

func TestParseReceipt(t *testing.T) {
	text := "command_id=c\nenv_id=e\nboot_id=b\nguardian_pid=7\nproof_dev=1\nproof_ino=18446744073709551615\n" +
		"start_error=starting%20/x:%0Ano%25\nleader_exited_at=1700000000123456789\nexit_code=-1\n" +
		"stop_reason=owner-exit\nleader_oom=false\nleader_oom_stale_ms=3\nfuture_key=1\ncomplete=true\n"
	r, err := ParseReceipt(append(sealed(text), "      "...))
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(0, 1700000000123456789).UTC()
	if r.CommandID != "c" || r.Guardian != 7 || r.ProofIno != 1<<64-1 || r.StartError != "starting /x:\nno%" ||
		r.LeaderExited == nil || !r.LeaderExited.Equal(at) || r.ExitCode == nil || *r.ExitCode != -1 ||
		r.StopReason != api.ReasonOwnerExit || r.LeaderOOM == nil || *r.LeaderOOM || r.LeaderOOMStaleMS != 3 || !r.Complete {
		t.Fatalf("receipt %+v", r)
	}
	torn := sealed(text)
	torn[3] = 'x'
	for _, b := range [][]byte{torn, []byte(text), sealed("exit_code=x\n"), sealed("exit_code\n")} {
		if r, err := ParseReceipt(b); err == nil {
			t.Errorf("%q accepted: %+v", b, r)
		}
	}
	if _, err := ParseReceipt([]byte("  \n\x00")); err != ErrNoReceipt {
		t.Errorf("an empty receipt: %v", err)
	}
	// Since decision 170 a field whose zero means none is always written
	// (0, "" or false): it reads as the same receipt as one from an older
	// guardian that left it out, and the fields written only once known
	// (exit code, signal, leader_oom, the times) stay unknown (nil).
	head := "command_id=c\nenv_id=e\nboot_id=b\nguardian_pid=7\nproof_dev=1\nproof_ino=2\n"
	zeros := "workload_pid=0\nworkload_start=0\nstart_error=\nstop_reason=\nstopped_by_hostfork=false\n" +
		"outside_cgroup=0\nmembership_unstable=false\noutput_truncated=false\nleader_oom_stale_ms=0\n"
	older, err := ParseReceipt(sealed(head + "complete=false\n"))
	if err != nil {
		t.Fatal(err)
	}
	newer, err := ParseReceipt(sealed(head + zeros + "complete=false\n"))
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprintf("%+v", *older) != fmt.Sprintf("%+v", *newer) || newer.ExitCode != nil || newer.Signal != nil ||
		newer.LeaderOOM != nil || newer.LeaderExited != nil || newer.TreeExited != nil {
		t.Fatalf("zero fields written %+v, left out %+v", *newer, *older)
	}
	ev, err := parseEvent([]byte("ev=exec-failed"))
	if err != nil || ev.Kind != "exec-failed" {
		t.Fatalf("event %+v (%v)", ev, err)
	}
}

// FuzzParseReceipt: whatever bytes a receipt holds, ParseReceipt returns a
// receipt or an error, never a panic; and a receipt accepted is one whose
// end line matches its text.
func FuzzParseReceipt(f *testing.F) {
	f.Add(sealed("command_id=c\nexit_code=0\nleader_exited_at=1\ncomplete=true\n"))
	f.Add(sealed("start_error=a%0Ab\nleader_oom=true\n"))
	f.Add([]byte("   \n"))
	f.Add([]byte("ev=leader code=1 at=2\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		if r, err := ParseReceipt(b); err == nil && r == nil {
			t.Fatal("nil receipt without an error")
		}
		_, _ = parseEvent(b)
	})
}

// FuzzReadReceipt: whatever bytes a receipt file holds, ReadReceipt
// returns a receipt of the registered command or an error — never a
// panic, never another command's receipt.
func FuzzReadReceipt(f *testing.F) {
	f.Add(sealed("command_id=c\nenv_id=e\nguardian_pid=1\nproof_dev=0\nproof_ino=0\ncomplete=true\n"))
	f.Add(sealed("command_id=other\ncomplete=true\n"))
	f.Add([]byte("   \n"))
	f.Add(sealed("command_id=c\nexit_code=x\n"))
	dir := f.TempDir()
	f.Fuzz(func(t *testing.T, b []byte) {
		p := filepath.Join(dir, "receipt")
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		fi, err := os.Stat(p)
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		r, err := ReadReceipt(p, "c", uint64(st.Dev), st.Ino)
		if err == nil && (r.CommandID != "c" || r.ProofIno != st.Ino) {
			t.Fatalf("accepted a receipt of %q (proof %d) for command c (inode %d)", r.CommandID, r.ProofIno, st.Ino)
		}
	})
}
