package node

import (
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"

	"github.com/habemus-papadum/hostfork/temporal/flow"
)

// TestCreateRetryOnAnotherNode: a Create retried on node b, whose earlier
// attempt made an environment on node a (as its heartbeat says), returns
// that environment without making one (the end-to-end TestCreateRetried
// mostly sees the retry land on a, where the label finds it).
func TestCreateRetryOnAnotherNode(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	a := NewActivities(Options{Node: "b"}) // no Host: nothing may be made
	env.RegisterActivity(a.Create)
	deadline := time.Now().Add(time.Hour).UTC().Truncate(time.Second)
	env.SetHeartbeatDetails(flow.CreateProgress{Node: "a", Env: "envona", DeadlineAt: deadline})
	v, err := env.ExecuteActivity(a.Create, flow.CreateRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var res flow.CreateResult
	if err := v.Get(&res); err != nil {
		t.Fatal(err)
	}
	if res.Node != "a" || res.Env != "envona" || !res.Reused || res.FoundBy != "heartbeat" || !res.DeadlineAt.Equal(deadline) {
		t.Fatalf("result %+v", res)
	}
}
