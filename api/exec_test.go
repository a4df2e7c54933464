package api_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"
	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/api/apitest"
)

// execTarget serves b, registers a job in fb (b's fake) and returns an
// official client and the job's allocation.
func execTarget(t *testing.T, b api.Backend, fb *apitest.Backend) (*nomadapi.Client, *nomadapi.Allocation) {
	t.Helper()
	srv := newTestServer(t, b)
	if _, err := fb.RegisterJob(context.Background(), testJob("web"), api.RegisterOptions{}); err != nil {
		t.Fatalf("register: %v", err)
	}
	client, err := nomadapi.NewClient(&nomadapi.Config{Address: srv.URL})
	if err != nil {
		t.Fatalf("client: %v", err)
	}
	alloc, _, err := client.Allocations().Info(fb.Allocations()[0].ID, nil)
	if err != nil {
		t.Fatalf("info: %v", err)
	}
	return client, alloc
}

// TestExecErrors: failures before the upgrade are HTTP errors, failures
// after it close the socket with the reason; both reach the official
// client's caller as one readable error.
func TestExecErrors(t *testing.T) {
	fb := apitest.NewBackend()
	client, alloc := execTarget(t, fb, fb)
	tests := []struct {
		name string
		task string
		cmd  []string
		want string
	}{
		{"unknown task", "nope", []string{"true"}, `task "nope"`},
		{"missing binary", "app", []string{"/nonexistent/meshlet-test"}, "failed to run /nonexistent/meshlet-test"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			var out bytes.Buffer
			_, err := client.Allocations().Exec(ctx, alloc, tc.task, false, tc.cmd,
				strings.NewReader(""), &out, &out, nil, nil)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Exec error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

// resizeBackend echoes the terminal sizes an exec session receives.
type resizeBackend struct {
	*apitest.Backend
}

func (b resizeBackend) ExecTask(ctx context.Context, req api.ExecRequest) (int, error) {
	if !req.TTY || req.Resize == nil {
		return 1, nil
	}
	for { // until the last size sent; an unread one may be replaced by a newer
		select {
		case sz := <-req.Resize:
			fmt.Fprintf(req.Stdout, "%dx%d\n", sz.Height, sz.Width)
			if sz.Height == 40 {
				return 0, nil
			}
		case <-ctx.Done():
			return 2, nil
		}
	}
}

// TestExecTerminalSize: the official client's tty_size frames reach the
// backend as terminal sizes, in order.
func TestExecTerminalSize(t *testing.T) {
	fb := resizeBackend{apitest.NewBackend()}
	client, alloc := execTarget(t, fb, fb.Backend)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	sizes := make(chan nomadapi.TerminalSize, 2)
	sizes <- nomadapi.TerminalSize{Height: 33, Width: 111}
	sizes <- nomadapi.TerminalSize{Height: 40, Width: 120}
	stdinR, stdinW := io.Pipe()
	defer stdinW.Close()
	var out bytes.Buffer
	code, err := client.Allocations().Exec(ctx, alloc, "app", true, []string{"sh"}, stdinR, &out, &out, sizes, nil)
	// The newest size wins over one not yet read (driver.OfferSize): the first
	// may be skipped, never reordered.
	if got := out.String(); err != nil || code != 0 || (got != "33x111\n40x120\n" && got != "40x120\n") {
		t.Fatalf("Exec = %d, %v, output %q", code, err, out.String())
	}
}
