package template

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/meshlet/meshlet/structs"
)

// releaseFIFO unblocks a reader stuck opening p (a regression would
// otherwise leave it, and the test binary, hanging).
func releaseFIFO(p string) {
	if f, err := os.OpenFile(p, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
		f.Close()
	}
}

func within(t *testing.T, what string, d time.Duration, fn func()) {
	t.Helper()
	done := make(chan struct{})
	go func() { defer close(done); fn() }()
	select {
	case <-done:
	case <-time.After(d):
		t.Fatalf("%s did not return within %v", what, d)
	}
}

// A task that replaces its rendered file with a FIFO must not block the
// watcher (and with it Stop, and the task runner): the FIFO is replaced.
func TestFIFOAtDestinationDoesNotBlock(t *testing.T) {
	f := newFixture(t, fastTmpl("noop"))
	f.register(1)
	f.prestart(t, f.hook, false)
	out := f.hook.tmpls[0].out.path()
	if err := os.Remove(out); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(out, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { releaseFIFO(out) })
	f.register(2)
	eventually(t, "the FIFO replaced by the re-render", func() bool {
		fi, err := os.Lstat(out)
		return err == nil && fi.Mode().IsRegular()
	})
	if got := read(t, out); got != "10.0.0.1:8001\n10.0.0.2:8002\n" {
		t.Errorf("rendered %q", got)
	}
	within(t, "Stop", 2*time.Second, f.hook.Stop)
}

// `file` on a FIFO the task made fails at once instead of blocking.
func TestFileFuncRefusesFIFO(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "pipe")
	if err := syscall.Mkfifo(p, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { releaseFIFO(p) })
	var err error
	within(t, "file", 2*time.Second, func() { _, err = (&renderCtx{taskDir: dir}).file("pipe") })
	if !errors.Is(err, ErrNotRegular) {
		t.Errorf("err %v, want ErrNotRegular", err)
	}
}

// On restore, an env template's file is read back without following a
// link the task put in its place: a link to another allocation's env
// file would hand that file's variables to this task.
func TestRestoreEnvDoesNotFollowLink(t *testing.T) {
	tm := fastTmpl("restart")
	tm.EmbeddedTmpl, tm.DestPath, tm.Envvars = sp(`A={{ len (service "api") }}`), sp("secrets/app.env"), sp(true)
	f := newFixture(t, tm)
	f.register(1)
	f.prestart(t, f.hook, false)
	f.hook.Stop()

	other := filepath.Join(t.TempDir(), "other.env")
	if err := os.WriteFile(other, []byte("STOLEN=secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := f.hook.tmpls[0].out.path()
	if err := os.Remove(p); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(other, p); err != nil {
		t.Fatal(err)
	}
	h2 := f.newHook([]*structs.Template{tm})
	f.prestart(t, h2, true)
	if env := h2.Env(); env["STOLEN"] != "" {
		t.Errorf("restored env read through a link: %v", env)
	}
}
