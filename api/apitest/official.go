package apitest

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"
)

// OfficialClientJobID is the job ExerciseOfficialClient registers.
const OfficialClientJobID = "official-client"

// OfficialClientTask is the task of that job.
const OfficialClientTask = "app"

// OfficialClientMarker is the line the job's task prints to stdout. A fake
// backend must serve it as the task's log (AppendTaskLog).
const OfficialClientMarker = "hello-from-meshlet"

// OfficialClientJobHCL is a raw_exec job a real agent can run.
const OfficialClientJobHCL = `
job "official-client" {
  datacenters = ["*"]
  type        = "service"

  group "app" {
    count = 1

    task "app" {
      driver = "raw_exec"

      config {
        command = "/bin/sh"
        args    = ["-c", "echo hello-from-meshlet; exec sleep 300"]
      }

      resources {
        cpu    = 50
        memory = 32
      }
    }
  }
}
`

// officialTimeout is a hang guard, not a performance target.
const officialTimeout = 60 * time.Second

// ExerciseOfficialClient drives the meshlet agent at addr
// ("http://127.0.0.1:port") with the official github.com/hashicorp/nomad/api
// client: ParseHCL, Register, Allocations (blocking queries until running),
// Allocations().Info, AllocFS().Logs (frames), Allocations().Exec (stdin,
// stdout, stderr, exit code over the websocket) and Deregister with purge.
// It works against any backend that runs OfficialClientJobHCL.
func ExerciseOfficialClient(t *testing.T, addr string) {
	t.Helper()
	ExerciseOfficialClientConfig(t, &nomadapi.Config{Address: addr})
}

// ExerciseOfficialClientConfig is ExerciseOfficialClient with the client's
// whole configuration (an https:// address and its TLSConfig).
func ExerciseOfficialClientConfig(t *testing.T, cfg *nomadapi.Config) {
	t.Helper()
	client, err := nomadapi.NewClient(cfg)
	if err != nil {
		t.Fatalf("failed to create nomad client: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), officialTimeout)
	defer cancel()

	job, err := client.Jobs().ParseHCL(OfficialClientJobHCL, true)
	if err != nil {
		t.Fatalf("ParseHCL: %v", err)
	}
	if job.ID == nil || *job.ID != OfficialClientJobID || len(job.TaskGroups) != 1 {
		t.Fatalf("ParseHCL returned an unexpected job: %+v", job)
	}
	if got := job.TaskGroups[0].Tasks[0].Config["command"]; got != "/bin/sh" {
		t.Fatalf("ParseHCL: task config command = %v, want /bin/sh", got)
	}
	resp, wm, err := client.Jobs().Register(job, nil)
	if err != nil {
		t.Fatalf("Register: %v", err)
	}
	if resp.EvalID == "" || wm.LastIndex == 0 {
		t.Fatalf("Register: want an eval ID and an index, got %+v (index %d)", resp, wm.LastIndex)
	}
	t.Cleanup(func() { _, _, _ = client.Jobs().Deregister(OfficialClientJobID, true, nil) })

	allocID := waitRunning(ctx, t, client)
	alloc, _, err := client.Allocations().Info(allocID[:8], nil)
	if err != nil {
		t.Fatalf("Allocations().Info by prefix: %v", err)
	}
	if alloc.ID != allocID || alloc.JobID != OfficialClientJobID || alloc.TaskGroup != "app" {
		t.Fatalf("Allocations().Info returned %s/%s/%s", alloc.ID, alloc.JobID, alloc.TaskGroup)
	}
	checkLogs(ctx, t, client, alloc)
	checkExec(ctx, t, client, alloc)

	evalID, _, err := client.Jobs().Deregister(OfficialClientJobID, true, nil)
	if err != nil || evalID == "" {
		t.Fatalf("Deregister: eval %q, %v", evalID, err)
	}
	waitPurged(ctx, t, client, allocID)
}

// waitRunning follows the job's allocations with blocking queries until one
// runs, and returns its ID.
func waitRunning(ctx context.Context, t *testing.T, client *nomadapi.Client) string {
	t.Helper()
	var index uint64
	for ctx.Err() == nil {
		q := (&nomadapi.QueryOptions{WaitIndex: index, WaitTime: 5 * time.Second}).WithContext(ctx)
		stubs, qm, err := client.Jobs().Allocations(OfficialClientJobID, false, q)
		if err != nil {
			t.Fatalf("Jobs().Allocations: %v", err)
		}
		if qm.LastIndex == 0 {
			t.Fatalf("Jobs().Allocations: no X-Nomad-Index")
		}
		for _, s := range stubs {
			switch s.ClientStatus {
			case "running":
				return s.ID
			case "failed", "lost":
				t.Fatalf("allocation %s is %s: %s", s.ID, s.ClientStatus, s.ClientDescription)
			}
		}
		index = qm.LastIndex
	}
	t.Fatalf("timed out after %s waiting for a running allocation", officialTimeout)
	return ""
}

// checkLogs reads the task's stdout through StreamFrames until the marker
// shows (a real task may not have written it yet).
func checkLogs(ctx context.Context, t *testing.T, client *nomadapi.Client, alloc *nomadapi.Allocation) {
	t.Helper()
	for ctx.Err() == nil {
		cancel := make(chan struct{})
		frames, errCh := client.AllocFS().Logs(alloc, false, OfficialClientTask, "stdout", "start", 0, cancel, nil)
		var got bytes.Buffer
	read:
		for {
			select {
			case f, ok := <-frames:
				if !ok {
					break read
				}
				got.Write(f.Data)
			case err := <-errCh:
				close(cancel)
				t.Fatalf("AllocFS().Logs: %v", err)
			}
		}
		close(cancel)
		if strings.Contains(got.String(), OfficialClientMarker) {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("timed out waiting for %q in the task's stdout", OfficialClientMarker)
}

// checkExec runs a command that reads stdin and writes both streams.
func checkExec(ctx context.Context, t *testing.T, client *nomadapi.Client, alloc *nomadapi.Allocation) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	cmd := []string{"/bin/sh", "-c", "read line; echo got:$line; echo oops >&2; exit 3"}
	code, err := client.Allocations().Exec(ctx, alloc, OfficialClientTask, false, cmd,
		strings.NewReader("ping\n"), &stdout, &stderr, nil, nil)
	if err != nil {
		t.Fatalf("Allocations().Exec: %v", err)
	}
	if code != 3 || stdout.String() != "got:ping\n" || stderr.String() != "oops\n" {
		t.Fatalf("Exec: code %d stdout %q stderr %q; want 3, %q, %q", code, stdout.String(), stderr.String(), "got:ping\n", "oops\n")
	}
}

// waitPurged waits until the job is gone and its allocation stopped (or
// garbage-collected with it).
func waitPurged(ctx context.Context, t *testing.T, client *nomadapi.Client, allocID string) {
	t.Helper()
	var index uint64
	for ctx.Err() == nil {
		q := (&nomadapi.QueryOptions{WaitIndex: index, WaitTime: 5 * time.Second}).WithContext(ctx)
		a, qm, err := client.Allocations().Info(allocID, q)
		stopped := false
		switch {
		case isNotFound(err):
			stopped = true
		case err != nil:
			t.Fatalf("Allocations().Info after deregister: %v", err)
		default:
			stopped = a.DesiredStatus == "stop" && a.ClientStatus != "running" && a.ClientStatus != "pending"
			index = qm.LastIndex
		}
		_, _, jerr := client.Jobs().Info(OfficialClientJobID, nil)
		if stopped && isNotFound(jerr) {
			return
		}
		if jerr != nil && !isNotFound(jerr) {
			t.Fatalf("Jobs().Info after deregister: %v", jerr)
		}
		if isNotFound(err) {
			time.Sleep(100 * time.Millisecond) // nothing to block on
		}
	}
	t.Fatalf("timed out after %s waiting for job %q to be purged", officialTimeout, OfficialClientJobID)
}

// isNotFound reports whether err is the official client's 404 error.
func isNotFound(err error) bool {
	var ure nomadapi.UnexpectedResponseError
	return errors.As(err, &ure) && ure.StatusCode() == 404
}
