package taskrunner

import (
	"context"
	"testing"

	"github.com/meshlet/meshlet/client/internal/fakedriver"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/structs"
)

// A driver's note on how it started a task (the connect_proxy driver's
// sidecar runtime) becomes a Driver event, with its details, right after
// Started; a start without one adds none.
func TestDriverMessageEvent(t *testing.T) {
	for _, tc := range []struct {
		name, message string
		want          string
	}{
		{"message", "Sidecar runtime: docker", "Received,Task Setup,Started,Driver"},
		{"none", "", "Received,Task Setup,Started"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, "service")
			f.drv.Script("web", fakedriver.Behavior{Message: tc.message, MessageDetails: map[string]string{"sidecar_runtime": "docker"}})
			tr := f.runner(nil)
			go tr.Run()
			testutil.WaitFor(t, hang, "task running", func() bool { return tr.State().State == structs.TaskStateRunning })
			st := tr.State()
			ctx, cancel := context.WithTimeout(context.Background(), hang)
			defer cancel()
			tr.Kill(ctx, nil)
			if got := eventTypes(st); got != tc.want {
				t.Fatalf("events %q, want %q", got, tc.want)
			}
			if tc.message == "" {
				return
			}
			ev := st.Events[len(st.Events)-1]
			if ev.DisplayMessage != tc.message || ev.Details["sidecar_runtime"] != "docker" {
				t.Errorf("driver event %+v", ev)
			}
		})
	}
}
