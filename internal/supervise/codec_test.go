package supervise

import (
	"encoding/json"
	"reflect"
	"testing"
)

// Receipts and events as guardian.c writes them (write_receipt, emit),
// with the receipt's padding.
var (
	guardianReceipts = []string{
		`{"command_id":"c1","env_id":"e1","boot_id":"0b5c","guardian_pid":41,"proof_dev":2049,"proof_ino":1234567,"complete":false}` + "\n      ",
		`{"command_id":"c1","env_id":"e1","boot_id":"0b5c","guardian_pid":41,"proof_dev":2049,"proof_ino":1234567,"workload_pid":42,` +
			`"workload_start":987654,"leader_exited_at":"2026-12-02T19:00:00.123456789Z","exit_code":0,"stop_reason":"timeout",` +
			`"stopped_by_hostfork":true,"outside_cgroup":2,"membership_unstable":true,"output_truncated":true,"leader_oom":false,` +
			`"tree_exited_at":"2026-12-02T19:00:01.5Z","complete":true}` + "\n",
		`{"command_id":"c\"2\\","env_id":"e","boot_id":"b","guardian_pid":1,"proof_dev":0,"proof_ino":0,"start_error":"exec \"x\": no such file\n",` +
			`"signal":9,"leader_oom":true,"complete":true}`,
		`{"command_id":"c3","env_id":"e","boot_id":"b","guardian_pid":1,"proof_dev":0,"proof_ino":0,"workload_pid":7,` +
			`"signal":9,"leader_oom_stale_ms":57,"tree_exited_at":"2026-12-02T19:00:01.5Z","complete":true}`,
	}
	guardianEvents = []string{
		`{"ev":"started","pid":42,"start":987654,"at":"2026-12-02T19:00:00.000000001Z"}`,
		`{"ev":"leader","pid":42,"code":3,"at":"2026-12-02T19:00:00.5Z"}`,
		`{"ev":"leader","pid":42,"signal":15,"reason":"user","at":"2026-12-02T19:00:00.5Z"}`,
		`{"ev":"exec-failed","error":"permission denied: \u00e9\t","at":"2026-12-02T19:00:00Z"}`,
		`{"ev":"tree","at":"2026-12-02T19:00:02Z"}`,
	}
	codecOddities = []string{
		`{}`, `null`, `[]`, `{"complete":1}`, `{"exit_code":null,"signal":"9"}`, `{"COMPLETE":true}`, `{"complete":true,"complete":false}`,
		`{"guardian_pid":1.5}`, `{"proof_ino":-1}`, `{"leader_exited_at":"yesterday"}`, `{"pid":null,"at":null}`, `{"Ev":"x"}`,
		`{"leader_oom":null,"tree_exited_at":null}`, `{"leader_oom_stale_ms":-3}`, `{"leader_oom_stale_ms":1e3}`, `{"unknown":[1,{"a":2}],"ev":"x"}`, `{"code":99999999999999999999}`,
	}
)

func sameReceipt(t *testing.T, doc []byte) {
	t.Helper()
	var got Receipt
	var want receiptNoCodec
	gerr, werr := decodeReceipt(doc, &got), json.Unmarshal(doc, &want)
	if (gerr == nil) != (werr == nil) || !reflect.DeepEqual(got, Receipt(want)) {
		t.Fatalf("%s: decoded %+v (%v), encoding/json %+v (%v)", doc, got, gerr, want, werr)
	}
}

func sameEvent(t *testing.T, doc []byte) {
	t.Helper()
	got, gerr := decodeEvent(doc)
	var want eventNoCodec
	werr := json.Unmarshal(doc, &want)
	if (gerr == nil) != (werr == nil) || !reflect.DeepEqual(got, Event(want)) {
		t.Fatalf("%s: decoded %+v (%v), encoding/json %+v (%v)", doc, got, gerr, want, werr)
	}
}

func TestGuardianMessagesDecodeAsEncodingJSON(t *testing.T) {
	for _, d := range guardianReceipts {
		sameReceipt(t, []byte(d))
		var r Receipt
		if !fastReceipt([]byte(d), &r) {
			t.Errorf("the guardian's receipt %s went to encoding/json", d)
		}
	}
	for _, d := range guardianEvents {
		sameEvent(t, []byte(d))
		var ev Event
		if !fastEvent([]byte(d), &ev) {
			t.Errorf("the guardian's event %s went to encoding/json", d)
		}
	}
	for _, d := range codecOddities {
		sameReceipt(t, []byte(d))
		sameEvent(t, []byte(d))
	}
}

func FuzzGuardianMessages(f *testing.F) {
	for _, l := range [][]string{guardianReceipts, guardianEvents, codecOddities} {
		for _, d := range l {
			f.Add([]byte(d))
		}
	}
	f.Fuzz(func(t *testing.T, doc []byte) {
		sameReceipt(t, doc)
		sameEvent(t, doc)
	})
}
