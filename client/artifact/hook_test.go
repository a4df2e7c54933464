package artifact

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/meshlet/meshlet/client/allocdir"
	"github.com/meshlet/meshlet/client/taskenv"
	"github.com/meshlet/meshlet/client/taskrunner"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/structs"
)

func hookRequest(t *testing.T, task *structs.Task) (*taskrunner.PrestartRequest, *[]*structs.TaskEvent) {
	t.Helper()
	ad := allocdir.New(t.TempDir(), "alloc-1")
	if err := ad.Build([]string{task.Name}, nil); err != nil {
		t.Fatal(err)
	}
	alloc := &structs.Allocation{ID: "alloc-1", TaskGroup: "g", Job: &structs.Job{ID: "j", Name: "j",
		TaskGroups: []*structs.TaskGroup{{Name: "g", Tasks: []*structs.Task{task}}}}}
	var events []*structs.TaskEvent
	return &taskrunner.PrestartRequest{Alloc: alloc, Task: task, TaskDir: ad.TaskDir(task.Name),
		Env:  taskenv.NewBuilder(nil, alloc, task).Build(),
		Emit: func(ev *structs.TaskEvent) { events = append(events, ev) }}, &events
}

func sharedDir(req *taskrunner.PrestartRequest) string {
	return filepath.Join(filepath.Dir(req.TaskDir.Dir), "alloc")
}

// Local sources come from the task's own dir or the shared alloc/ dir,
// never from a sibling task's dir (its secrets).
func TestHookLocalSourceRoots(t *testing.T) {
	task := &structs.Task{Name: "web", Artifacts: []*structs.TaskArtifact{{GetterSource: "../alloc/data/shared.txt"}}}
	req, _ := hookRequest(t, task)
	allocDir := filepath.Dir(req.TaskDir.Dir)
	if err := os.WriteFile(filepath.Join(allocDir, "alloc", "data", "shared.txt"), []byte("shared"), 0o644); err != nil {
		t.Fatal(err)
	}
	sibling := filepath.Join(allocDir, "db", "secrets")
	if err := os.MkdirAll(sibling, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(sibling, "token"), []byte("s3cret"), 0o600); err != nil {
		t.Fatal(err)
	}
	h := NewHook(New(Config{}), sharedDir(req), nil)
	if _, err := h.Prestart(context.Background(), req); err != nil {
		t.Fatalf("source in alloc/: %v", err)
	}
	if got := readFile(t, filepath.Join(req.TaskDir.LocalDir, "shared.txt")); got != "shared" {
		t.Errorf("shared.txt = %q", got)
	}
	task.Artifacts[0].GetterSource = "../db/secrets/token"
	if _, err := h.Prestart(context.Background(), req); !errors.Is(err, ErrSourceNotAllowed) {
		t.Errorf("sibling's secret: error = %v, want ErrSourceNotAllowed", err)
	}
	if _, err := os.Stat(filepath.Join(req.TaskDir.LocalDir, "token")); err == nil {
		t.Error("the sibling's secret was copied")
	}
}

func TestHookFetchesAndInterpolates(t *testing.T) {
	srv := newServer(t, map[string][]byte{"/web/app.tgz": tarGz(t, entry{name: "app.txt", body: "app"})})
	task := &structs.Task{Name: "web", Env: map[string]string{"BASE": srv.URL}, Artifacts: []*structs.TaskArtifact{{
		GetterSource: "${BASE}/${NOMAD_TASK_NAME}/app.tgz", RelativeDest: "local/${NOMAD_TASK_NAME}",
		GetterHeaders: map[string]string{"X-Task": "${NOMAD_TASK_NAME}"},
	}}}
	req, events := hookRequest(t, task)
	done, err := NewHook(New(Config{}), sharedDir(req), nil).Prestart(context.Background(), req)
	if err != nil || !done {
		t.Fatalf("Prestart = %v, %v", done, err)
	}
	if got := readFile(t, filepath.Join(req.TaskDir.LocalDir, "web", "app.txt")); got != "app" {
		t.Errorf("app.txt = %q", got)
	}
	if len(*events) != 1 || (*events)[0].Type != structs.TaskDownloadingArtifacts {
		t.Errorf("events = %+v", *events)
	}
	if h := srv.headers[len(srv.headers)-1].Get("X-Task"); h != "web" {
		t.Errorf("X-Task header = %q, want web", h)
	}
}

func TestHookChecksumMismatchEvent(t *testing.T) {
	srv := newServer(t, map[string][]byte{"/a.txt": []byte("a")})
	task := &structs.Task{Name: "web", Artifacts: []*structs.TaskArtifact{{
		GetterSource:  "http://user:pw@" + strings.TrimPrefix(srv.URL, "http://") + "/a.txt",
		GetterOptions: map[string]string{"checksum": sha([]byte("b"))},
	}}}
	req, events := hookRequest(t, task)
	done, err := NewHook(New(Config{}), sharedDir(req), nil).Prestart(context.Background(), req)
	if done || !errors.Is(err, ErrChecksumMismatch) {
		t.Fatalf("Prestart = %v, %v; want ErrChecksumMismatch", done, err)
	}
	if len(*events) != 2 {
		t.Fatalf("events = %+v", *events)
	}
	ev := (*events)[1]
	if ev.Type != structs.TaskArtifactDownloadFailed || !strings.Contains(ev.DownloadError, "checksums did not match") ||
		ev.DisplayMessage != ev.DownloadError {
		t.Errorf("failure event = %+v", ev)
	}
	if strings.Contains(ev.DisplayMessage, "pw@") || !strings.Contains(ev.DisplayMessage, "user:xxxxx@") {
		t.Errorf("password not redacted: %s", ev.DisplayMessage)
	}
}

func TestHookChown(t *testing.T) {
	testutil.RequireRoot(t) // chown
	uid, gid, err := allocdir.LookupUser("nobody")
	if err != nil {
		t.Skipf("no user nobody: %v", err)
	}
	srv := newServer(t, map[string][]byte{"/a.tgz": tarGz(t, entry{name: "d/a.txt", body: "a"}), "/b.txt": []byte("b")})
	task := &structs.Task{Name: "web", User: "nobody", Artifacts: []*structs.TaskArtifact{
		{GetterSource: srv.URL + "/a.tgz", RelativeDest: "local/a", Chown: true},
		{GetterSource: srv.URL + "/b.txt", RelativeDest: "local/b"},
	}}
	req, _ := hookRequest(t, task)
	if _, err := NewHook(New(Config{}), sharedDir(req), nil).Prestart(context.Background(), req); err != nil {
		t.Fatal(err)
	}
	owner := func(rel string) (int, int) {
		fi, err := os.Lstat(filepath.Join(req.TaskDir.Dir, rel))
		if err != nil {
			t.Fatal(err)
		}
		st := fi.Sys().(*syscall.Stat_t)
		return int(st.Uid), int(st.Gid)
	}
	for _, rel := range []string{"local/a", "local/a/d", "local/a/d/a.txt"} {
		if u, g := owner(rel); u != uid || g != gid {
			t.Errorf("%s owned by %d:%d, want %d:%d", rel, u, g, uid, gid)
		}
	}
	if u, _ := owner("local/b/b.txt"); u != 0 {
		t.Errorf("local/b/b.txt (chown = false) owned by %d, want root", u)
	}
}
