package supervise

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// FuzzReadReceipt: whatever bytes a receipt file holds, ReadReceipt
// returns a receipt of the registered command or an error — never a
// panic, never another command's receipt.
func FuzzReadReceipt(f *testing.F) {
	f.Add([]byte(`{"command_id":"c","env_id":"e","guardian_pid":1,"proof_dev":0,"proof_ino":0,"complete":true}`))
	f.Add([]byte(`{"command_id":"other","complete":true}`))
	f.Add([]byte("   \n"))
	f.Add([]byte(`{"command_id":"c","exit_code":"x"}`))
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
