package api_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"
	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/api/apitest"
)

// TestExecErrors: failures before the upgrade are HTTP errors, failures
// after it close the socket with the reason; both reach the official
// client's caller as one readable error.
func TestExecErrors(t *testing.T) {
	fb := apitest.NewBackend()
	srv := newTestServer(t, fb)
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
