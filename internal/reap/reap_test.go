package reap

import (
	"errors"
	"strings"
	"testing"

	"github.com/habemus-papadum/hostfork/api"
)

// A stop a reap attempted is reported done only when it finished; one
// that did not is the stop-failed action and pending, with its reason
// (issue 39, item 10).
func TestReportStop(t *testing.T) {
	var rep api.ReapReport
	reportStop(&rep, "e1", "", "completed-stop", "deadline", nil)
	reportStop(&rep, "e1", "c1", "completed-stop", "user", errors.New("tree is live: unverified"))
	if len(rep.Actions) != 2 || rep.Actions[0].Action != "completed-stop" || rep.Actions[1].Action != api.ReapStopFailed {
		t.Fatalf("actions: %+v", rep.Actions)
	}
	if len(rep.Pending) != 1 || rep.Pending[0].What != "command c1" || !strings.Contains(rep.Pending[0].Reason, "did not finish: tree is live") {
		t.Fatalf("pending: %+v", rep.Pending)
	}
}
