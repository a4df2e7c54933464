package command

import (
	"bytes"
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/api/apitest"
	"github.com/meshlet/meshlet/intention"
	"github.com/meshlet/meshlet/structs"
)

// assertNoControl fails when out holds a raw ESC or BEL, and when it lacks
// any of the escaped forms in want.
func assertNoControl(t *testing.T, what, out string, want ...string) {
	t.Helper()
	if strings.ContainsAny(out, "\x1b\x07") {
		t.Errorf("%s printed a raw control character:\n%q", what, out)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("%s: output lacks %q:\n%s", what, w, out)
		}
	}
}

// alloc status prints the allocation's address, the sidecar's and the
// gateway's proxy (a job's image, a node's envoy path) escaped.
func TestAllocStatusEscapesServerText(t *testing.T) {
	image := "envoy\x1b]0;owned\x07:1"
	tg := &nomadapi.TaskGroup{Name: new("web"), Tasks: []*nomadapi.Task{
		{Name: "connect-proxy-web", Kind: "connect-proxy:web", Driver: "docker", Config: map[string]any{"image": image}},
		{Name: "gw", Kind: "connect-ingress:gw\x1b[31m", Driver: "docker", Config: map[string]any{"image": image}},
	}}
	a := &nomadapi.Allocation{ID: "a1", TaskGroup: "web", Job: &nomadapi.Job{TaskGroups: []*nomadapi.TaskGroup{tg}},
		NetworkStatus: &nomadapi.AllocNetworkStatus{Address: "172.26.64.2\x1b[2J"}}
	var b bytes.Buffer
	writeAllocStatus(&b, a, time.Now(), "Envoy (/usr/bin/envoy\x1b[2J)", time.Time{}, "")
	assertNoControl(t, "alloc status", b.String(),
		`Allocation Address: 172.26.64.2\x1b[2J`,
		`Sidecar Proxy: Envoy container (envoy\x1b]0;owned\a:1)`,
		`Ingress Gateway: gw\x1b[31m (Envoy container (envoy\x1b]0;owned\a:1))`)
}

// drainBackend keeps the node's allocations running through the drain
// and, once the drain monitor has listed them, fails them with a client
// status of its own.
type drainBackend struct {
	*apitest.Backend
	status  string
	drained atomic.Bool
	once    sync.Once
}

func (d *drainBackend) UpdateNodeDrain(ctx context.Context, id string, spec *structs.DrainSpec, markEligible bool) (*api.NodeUpdateResult, error) {
	res, err := d.Backend.UpdateNodeDrain(ctx, id, spec, markEligible)
	for _, a := range d.Allocations() {
		d.UpdateAlloc(a.ID, func(a *structs.Allocation) { a.ClientStatus = structs.AllocClientStatusRunning })
	}
	d.drained.Store(spec != nil)
	return res, err
}

func (d *drainBackend) ListAllocations(ctx context.Context) ([]*structs.Allocation, error) {
	allocs, err := d.Backend.ListAllocations(ctx)
	if d.drained.Load() {
		d.once.Do(func() {
			go func() {
				for _, a := range allocs {
					d.UpdateAlloc(a.ID, func(a *structs.Allocation) { a.ClientStatus = d.status })
				}
			}()
		})
	}
	return allocs, err
}

// node drain prints the monitor's messages, which quote the allocations'
// client status as the servers give it, escaped.
func TestNodeDrainEscapesMessages(t *testing.T) {
	fb := &drainBackend{Backend: apitest.NewBackend(), status: "failed\x1b[2J"}
	srv := httptest.NewServer(api.NewServer(fb, hclog.NewNullLogger()).Handler())
	t.Cleanup(srv.Close)
	t.Setenv("MESHLET_ADDR", srv.URL)
	if r := runCLI(t, "", "job", "run", "-detach", writeFile(t, "web.hcl", webJobHCL)); r.code != 0 {
		t.Fatalf("run: %s", r.stderr)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	stdout, stderr, done := startCLI(ctx, "node", "drain", "-enable", "-yes", apitest.NodeID)
	if code := <-done; code != 0 {
		t.Fatalf("drain: exit %d: %s", code, stderr.String())
	}
	assertNoControl(t, "node drain", stdout.String(), `status running -> failed\x1b[2J`)
}

// registerBackend answers every registration with warnings of its own,
// or refuses it with err.
type registerBackend struct {
	*apitest.Backend
	warnings string
	err      error
}

func (b registerBackend) RegisterJob(ctx context.Context, job *structs.Job, opts api.RegisterOptions) (*api.RegisterResult, error) {
	if b.err != nil {
		return nil, b.err
	}
	res, err := b.Backend.RegisterJob(ctx, job, opts)
	if res != nil {
		res.Warnings = b.warnings
	}
	return res, err
}

// job run prints the servers' Job Warnings line by line, and their errors,
// escaped.
func TestJobRunEscapesServerText(t *testing.T) {
	for _, tc := range []struct {
		name string
		fb   registerBackend
		want string
	}{
		{"warnings", registerBackend{warnings: "first\x1b[2J\nsecond\x07"}, "Job Warnings:\nfirst\\x1b[2J\nsecond\\a\n"},
		{"error", registerBackend{err: fmt.Errorf("%w: no \x1b]0;owned\x07 here", api.ErrInvalid)}, `no \x1b]0;owned\a here`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tc.fb.Backend = apitest.NewBackend()
			srv := httptest.NewServer(api.NewServer(tc.fb, hclog.NewNullLogger()).Handler())
			t.Cleanup(srv.Close)
			t.Setenv("MESHLET_ADDR", srv.URL)
			r := runCLI(t, "", "job", "run", "-detach", writeFile(t, "web.hcl", webJobHCL))
			if (r.code == 0) != (tc.fb.err == nil) {
				t.Fatalf("run: exit %d: %s", r.code, r.stderr)
			}
			assertNoControl(t, "job run", r.stderr, tc.want)
		})
	}
}

// job validate prints the jobspec's diagnostics escaped: they quote the
// file's text.
func TestJobValidateEscapesDiagnostics(t *testing.T) {
	path := writeFile(t, "bad.hcl", `job "x" {
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = file("/nonexistent`+"\x1b[2J"+`")
      }
    }
  }
}
`)
	r := runCLI(t, "", "job", "validate", path)
	if r.code == 0 {
		t.Fatalf("validate accepted a broken jobspec: %s", r.stdout)
	}
	assertNoControl(t, "job validate", r.stdout+r.stderr, `\x1b[2J`)
}

// intention check prints the reason, which quotes an intention's HTTP
// permission, escaped.
func TestIntentionCheckEscapesReason(t *testing.T) {
	store := newConnectAPI(t)
	if _, err := store.Upsert(intention.Intention{SourceName: "web", DestinationName: "api", Permissions: []*intention.Permission{
		{Action: "deny", HTTP: &intention.HTTPPermission{PathPrefix: "/adm\x1b[2Jin"}},
	}}, true); err != nil {
		t.Fatal(err)
	}
	r := runCLI(t, "", "intention", "check", "-path", "/adm\x1b[2Jin/x", "web", "api")
	if r.code != 1 {
		t.Fatalf("check: exit %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	assertNoControl(t, "intention check", r.stdout, `deny when path starts with /adm\x1b[2Jin`)
}
