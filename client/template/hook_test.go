package template

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/client/taskrunner"
	"github.com/meshlet/meshlet/structs"
)

// recorder stands in for the task runner: it records what the hook asks.
type recorder struct {
	mu       sync.Mutex
	restarts []string
	signals  []string
	events   []*structs.TaskEvent
}

func (r *recorder) RestartInPlace(_ context.Context, reason string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.restarts = append(r.restarts, reason)
	return nil
}

func (r *recorder) Signal(ev *structs.TaskEvent, sig string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.signals = append(r.signals, sig)
	r.events = append(r.events, ev)
	return nil
}

func (r *recorder) EmitEvent(ev *structs.TaskEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, ev)
}

func (r *recorder) snapshot() (restarts, signals, messages []string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, e := range r.events {
		messages = append(messages, e.Type+": "+e.DisplayMessage)
	}
	return slices.Clone(r.restarts), slices.Clone(r.signals), messages
}

func sp[T any](v T) *T { return &v }

const listTmpl = `{{ range service "api" }}{{ .Address }}:{{ .Port }}
{{ end }}`

type fixture struct {
	cat  *catalog.Catalog
	dirs Dirs
	rec  *recorder
	hook *Hook
}

func newFixture(t *testing.T, tmpls ...*structs.Template) *fixture {
	t.Helper()
	root := t.TempDir()
	f := &fixture{cat: catalog.New(), rec: &recorder{},
		dirs: Dirs{TaskDir: filepath.Join(root, "web"), SharedDir: filepath.Join(root, "alloc")}}
	for _, d := range []string{f.dirs.TaskDir, f.dirs.SharedDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	f.hook = f.newHook(tmpls)
	return f
}

func (f *fixture) newHook(tmpls []*structs.Template) *Hook {
	return New(Config{AllocID: "a1", Task: &structs.Task{Name: "web", Templates: tmpls}, Dirs: f.dirs, Catalog: f.cat,
		Rand: func(int64) int64 { return 0 }, FilePoll: 50 * time.Millisecond, RestoreDelay: 10 * time.Millisecond})
}

func (f *fixture) prestart(t *testing.T, h *Hook, restored bool) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := h.Prestart(ctx, taskrunner.TaskHookRequest{Restored: restored}); err != nil {
		t.Fatal(err)
	}
	h.task = f.rec // what a runner would be; Prestart set none
	h.watching = true
	go h.watch(restored)
	t.Cleanup(h.Stop)
}

func (f *fixture) register(n int) {
	f.cat.Register(catalog.ServiceInstance{ID: "api-" + string(rune('0'+n)), Name: "api", Address: "10.0.0." + string(rune('0'+n)),
		Port: 8000 + n, Healthy: true})
}

func read(t *testing.T, p string) string {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func eventually(t *testing.T, what string, fn func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !fn() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func fastTmpl(mode string) *structs.Template {
	return &structs.Template{EmbeddedTmpl: sp(listTmpl), DestPath: sp("local/api.txt"), ChangeMode: sp(mode),
		Splay: sp(time.Duration(0)), Wait: &structs.WaitConfig{Min: sp(20 * time.Millisecond), Max: sp(200 * time.Millisecond)}}
}

func TestPrestartBlocksUntilServiceExists(t *testing.T) {
	tm := fastTmpl("restart")
	tm.Perms = sp("600")
	f := newFixture(t, tm)
	done := make(chan error, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	f.hook.task = f.rec // to see the Missing event
	go func() { done <- f.hook.Prestart(ctx, taskrunner.TaskHookRequest{}) }()
	eventually(t, "the Missing event", func() bool {
		_, _, msgs := f.rec.snapshot()
		return slices.Contains(msgs, TaskHookMessage+": Missing: health.service(api|passing)")
	})
	select {
	case err := <-done:
		t.Fatalf("Prestart returned before the service existed: %v", err)
	default:
	}
	f.register(1)
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(f.dirs.TaskDir, "local", "api.txt")
	if got := read(t, p); got != "10.0.0.1:8001\n" {
		t.Errorf("rendered %q", got)
	}
	if fi, _ := os.Stat(p); fi.Mode().Perm() != 0o600 {
		t.Errorf("perms %v", fi.Mode().Perm())
	}
	f.hook.Stop()
}

func TestPrestartCanceled(t *testing.T) {
	f := newFixture(t, fastTmpl("restart"))
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := f.hook.Prestart(ctx, taskrunner.TaskHookRequest{})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err %v, want context.Canceled", err)
	}
	f.hook.Stop()
}

func TestChangeModes(t *testing.T) {
	sig := fastTmpl("signal")
	sig.ChangeSignal = sp("SIGHUP")
	sig.DestPath = sp("../alloc/api.txt")
	tests := []struct {
		name                 string
		tmpl                 *structs.Template
		restarts, signals    int
		wantMsg, wantRestart string
	}{
		{"restart", fastTmpl("restart"), 1, 0, "", msgRestart},
		{"signal", sig, 0, 1, structs.TaskSignaling + ": " + msgRendered, ""},
		{"noop", fastTmpl("noop"), 0, 0, TaskHookMessage + ": " + msgRendered, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.tmpl)
			f.register(1)
			f.prestart(t, f.hook, false)
			f.register(2)
			out := filepath.Join(f.hook.tmpls[0].out.path())
			eventually(t, "the re-render", func() bool { return read(t, out) == "10.0.0.1:8001\n10.0.0.2:8002\n" })
			eventually(t, "the change mode", func() bool {
				r, s, m := f.rec.snapshot()
				return len(r) == tc.restarts && len(s) == tc.signals && (tc.wantMsg == "" || slices.Contains(m, tc.wantMsg))
			})
			// A change that leaves the content as it is does nothing.
			f.cat.Register(catalog.ServiceInstance{ID: "other", Name: "other", Healthy: true})
			time.Sleep(300 * time.Millisecond)
			r, s, _ := f.rec.snapshot()
			if len(r) != tc.restarts || len(s) != tc.signals {
				t.Errorf("after an unrelated change: restarts %q signals %q", r, s)
			}
			if tc.wantRestart != "" && r[0] != tc.wantRestart {
				t.Errorf("restart reason %q", r[0])
			}
			if tc.signals > 0 && s[0] != "SIGHUP" {
				t.Errorf("signal %q", s[0])
			}
		})
	}
}

func TestWaitCoalescesChanges(t *testing.T) {
	tm := fastTmpl("restart")
	tm.Wait = &structs.WaitConfig{Min: sp(150 * time.Millisecond), Max: sp(2 * time.Second)}
	f := newFixture(t, tm)
	f.register(1)
	f.prestart(t, f.hook, false)
	for n := 2; n <= 4; n++ {
		f.register(n)
		time.Sleep(30 * time.Millisecond)
	}
	out := f.hook.tmpls[0].out.path()
	eventually(t, "the re-render", func() bool { return len(read(t, out)) == 4*len("10.0.0.1:8001\n") })
	time.Sleep(300 * time.Millisecond)
	if r, _, _ := f.rec.snapshot(); len(r) != 1 {
		t.Errorf("restarts %d, want 1 for three quick changes", len(r))
	}
}

func TestEnvTemplate(t *testing.T) {
	tm := fastTmpl("restart")
	tm.EmbeddedTmpl = sp(`API_COUNT={{ len (service "api") }}
GREETING="hello {{ env "NAME" }}"`)
	tm.DestPath = sp("secrets/app.env")
	tm.Envvars = sp(true)
	f := newFixture(t, tm)
	f.register(1)
	f.prestart(t, f.hook, false)
	if env := f.hook.Env(); env["API_COUNT"] != "1" || env["GREETING"] != "hello " {
		t.Errorf("env %v", env)
	}
	f.register(2)
	eventually(t, "the env update", func() bool { return f.hook.Env()["API_COUNT"] == "2" })
}

func TestRestoreDoesNotRestartUnchanged(t *testing.T) {
	f := newFixture(t, fastTmpl("restart"))
	f.register(1)
	f.prestart(t, f.hook, false)
	f.hook.Stop()

	// A new agent: the same content renders, nothing happens.
	h2 := f.newHook([]*structs.Template{fastTmpl("restart")})
	f.prestart(t, h2, true)
	time.Sleep(300 * time.Millisecond)
	if r, _, _ := f.rec.snapshot(); len(r) != 0 {
		t.Fatalf("restored task restarted: %q", r)
	}
	h2.Stop()

	// Data changed while the agent was down: the restored task restarts.
	f.register(2)
	h3 := f.newHook([]*structs.Template{fastTmpl("restart")})
	f.prestart(t, h3, true)
	eventually(t, "the restart", func() bool { r, _, _ := f.rec.snapshot(); return len(r) == 1 })
}

func TestRestoreEnvFromFile(t *testing.T) {
	tm := fastTmpl("restart")
	tm.EmbeddedTmpl, tm.Envvars = sp(`A={{ len (service "api") }}`), sp(true)
	f := newFixture(t, tm)
	f.register(1)
	f.prestart(t, f.hook, false)
	f.hook.Stop()
	f.cat.DeregisterAlloc("")
	_ = f.cat.Deregister("api-1") // the agent restarted with an empty catalog
	h2 := f.newHook([]*structs.Template{tm})
	f.prestart(t, h2, true)
	if env := h2.Env(); env["A"] != "1" {
		t.Errorf("restored env %v", env)
	}
	time.Sleep(200 * time.Millisecond)
	if r, _, _ := f.rec.snapshot(); len(r) != 0 {
		t.Errorf("restarted on an empty catalog: %q", r)
	}
}

func TestResolveErrors(t *testing.T) {
	f := newFixture(t, &structs.Template{EmbeddedTmpl: sp("x"), DestPath: sp("../../x")})
	err := f.hook.Prestart(context.Background(), taskrunner.TaskHookRequest{})
	if !errors.Is(err, ErrEscapes) {
		t.Errorf("escaping destination: %v", err)
	}
	f = newFixture(t, &structs.Template{SourcePath: sp("local/missing.tpl"), DestPath: sp("local/x")})
	if err := f.hook.Prestart(context.Background(), taskrunner.TaskHookRequest{}); err == nil {
		t.Error("missing source: no error")
	}
	f = newFixture(t, &structs.Template{EmbeddedTmpl: sp("{{ bogus }}"), DestPath: sp("local/x")})
	if err := f.hook.Prestart(context.Background(), taskrunner.TaskHookRequest{}); err == nil {
		t.Error("bad template: no error")
	}
}

// A template reading a file follows it by polling; a failing re-render
// keeps the last file and records the error, and acts on nothing.
func TestFileTemplateFailureAndRecovery(t *testing.T) {
	tm := fastTmpl("restart")
	tm.EmbeddedTmpl = sp(`cfg={{ file "local/in.txt" }}`)
	f := newFixture(t, tm)
	in := filepath.Join(f.dirs.TaskDir, "local", "in.txt")
	if err := os.MkdirAll(filepath.Dir(in), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(in, []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.prestart(t, f.hook, false)
	out := f.hook.tmpls[0].out.path()
	if got := read(t, out); got != "cfg=one" {
		t.Fatalf("rendered %q", got)
	}
	if err := os.Remove(in); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the failure event", func() bool {
		_, _, msgs := f.rec.snapshot()
		for _, m := range msgs {
			if strings.HasPrefix(m, TaskHookMessage+": Template failed: ") && strings.Contains(m, "in.txt") {
				return true
			}
		}
		return false
	})
	if got := read(t, out); got != "cfg=one" {
		t.Errorf("file changed to %q after a failed render", got)
	}
	time.Sleep(200 * time.Millisecond) // several polls
	if _, _, msgs := f.rec.snapshot(); len(msgs) != 1 {
		t.Errorf("events %q, want the failure once", msgs)
	}
	if err := os.WriteFile(in, []byte("two"), 0o644); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the re-render and restart", func() bool {
		r, _, _ := f.rec.snapshot()
		return read(t, out) == "cfg=two" && len(r) == 1
	})
}

// A file `file` reads that does not exist fails the first render, as in
// Nomad: consul-template's file dependency reports the missing file as an
// error, which is not retried and fails the task ("Template failed").
func TestFileMissingAtFirstRenderFails(t *testing.T) {
	tm := fastTmpl("restart")
	tm.EmbeddedTmpl = sp(`cfg={{ file "local/absent.txt" }}`)
	f := newFixture(t, tm)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := f.hook.Prestart(ctx, taskrunner.TaskHookRequest{})
	if !errors.Is(err, os.ErrNotExist) || !strings.Contains(err.Error(), "absent.txt") {
		t.Fatalf("Prestart: %v, want a not-exist error naming absent.txt", err)
	}
	if _, err := os.Stat(filepath.Join(f.dirs.TaskDir, "local", "api.txt")); !os.IsNotExist(err) {
		t.Errorf("destination written after a failed first render: %v", err)
	}
}
