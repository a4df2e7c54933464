package allocrunner

import (
	"context"
	"os"
	"os/user"
	"path/filepath"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/client/allocdir"
	clientstate "github.com/meshlet/meshlet/client/state"
	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/driver/executor"
	"github.com/meshlet/meshlet/driver/rawexec"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/structs"
)

// TestMain lets the raw_exec driver run this test binary as its executor.
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "executor" {
		os.Exit(executor.Main(os.Args[2:]))
	}
	os.Exit(m.Run())
}

// secretHook writes a secret into a task's secrets/ dir, as the sidecar
// hook writes Envoy's bootstrap.
type secretHook struct{ task string }

func (secretHook) Name() string { return "secret" }
func (s secretHook) Prerun(_ context.Context, hc *AllocHookContext) error {
	return os.WriteFile(filepath.Join(hc.AllocDir.TaskDir(s.task).SecretsDir, "token"), []byte("s3cret\n"), 0o644)
}
func (secretHook) Postrun(context.Context, *AllocHookContext) error { return nil }
func (secretHook) Destroy(context.Context, *AllocHookContext) error { return nil }

// TestTaskUserOwnsItsDirectories runs a real raw_exec task as nobody: it
// must write into local/ and tmp/ and read its secret (before, all were
// root's and the task failed).
func TestTaskUserOwnsItsDirectories(t *testing.T) {
	testutil.RequireRoot(t)
	if _, err := user.Lookup("nobody"); err != nil {
		t.Skipf("no user nobody: %v", err)
	}
	dir := t.TempDir()
	// t.TempDir's directories are 0700: let nobody reach the alloc dir.
	for _, p := range []string{filepath.Dir(dir), dir} {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	db, err := clientstate.Open(filepath.Join(dir, "client", "state.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = db.Close() })
	script := `set -e; cat "$NOMAD_SECRETS_DIR/token" > "$NOMAD_TASK_DIR/out"; id -un >> "$NOMAD_TASK_DIR/out"; touch "$NOMAD_TASK_DIR/../tmp/x"`
	tk := &structs.Task{Name: "web", Driver: "raw_exec", User: "nobody",
		Config:        map[string]any{"command": "/bin/sh", "args": []any{"-c", script}},
		RestartPolicy: &structs.RestartPolicy{Attempts: ip(0), Mode: sp("fail")}}
	job := &structs.Job{ID: "j", Name: "j", Type: structs.JobTypeBatch, TaskGroups: []*structs.TaskGroup{{Name: "g", Count: 1, Tasks: []*structs.Task{tk}}}}
	alloc := &structs.Allocation{ID: "alloc-user", Name: "j.g[0]", JobID: "j", TaskGroup: "g", Job: job, DesiredStatus: structs.AllocDesiredStatusRun}
	drv := rawexec.New(rawexec.Config{StateDir: t.TempDir()}, hclog.NewNullLogger())
	ad := allocdir.New(filepath.Join(dir, "alloc"), alloc.ID)
	ar, err := New(Config{Alloc: alloc, Node: &structs.Node{ID: "n1", Datacenter: "dc1"}, AllocDir: ad, State: db,
		Driver: func(string) (driver.Driver, error) { return drv, nil }, Hooks: []AllocHook{secretHook{task: "web"}}})
	if err != nil {
		t.Fatal(err)
	}
	go ar.Run()
	waitDone(t, ar)
	view := ar.ClientView()
	if view.ClientStatus != structs.AllocClientStatusComplete {
		logs, _ := os.ReadFile(filepath.Join(ad.LogDir, "web.stderr.0"))
		t.Fatalf("status %s (%s); task stderr: %s", view.ClientStatus, view.ClientDescription, logs)
	}
	out, err := os.ReadFile(filepath.Join(ad.TaskDir("web").LocalDir, "out"))
	if err != nil {
		t.Fatal(err)
	}
	if got := string(out); got != "s3cret\nnobody\n" {
		t.Fatalf("task wrote %q", got)
	}
}
