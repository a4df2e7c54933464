package template

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshlet/meshlet/client/taskrunner"
)

func writeBig(t *testing.T, dir string, n int) {
	t.Helper()
	p := filepath.Join(dir, "local", "big")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, bytes.Repeat([]byte("x"), n), 0o644); err != nil {
		t.Fatal(err)
	}
}

// A render larger than the template source limit is still compared with
// the whole file: re-rendering the same content does not restart the task.
func TestLargeRenderUnchangedDoesNotRestart(t *testing.T) {
	tm := fastTmpl("restart")
	tm.EmbeddedTmpl = sp(`{{ file "local/big" }}{{ file "local/big" }}`)
	f := newFixture(t, tm)
	writeBig(t, f.dirs.TaskDir, 3<<20)
	f.prestart(t, f.hook, false)
	time.Sleep(500 * time.Millisecond) // the file is polled every 50ms
	if r, _, _ := f.rec.snapshot(); len(r) != 0 {
		t.Errorf("%d restarts for a file whose content never changed", len(r))
	}
	if fi, err := os.Stat(f.hook.tmpls[0].out.path()); err != nil || fi.Size() != 6<<20 {
		t.Errorf("rendered file: %v, %v", fi, err)
	}
}

// A render's output is bounded: a template cannot grow the agent's memory
// without limit.
func TestRenderOutputBounded(t *testing.T) {
	tm := fastTmpl("restart")
	tm.EmbeddedTmpl = sp(`{{ $b := file "local/big" }}{{ range split "," ",,,,,,,,,," }}{{ $b }}{{ end }}`)
	f := newFixture(t, tm)
	writeBig(t, f.dirs.TaskDir, 2<<20) // 11 copies: 22 MiB
	err := f.hook.Prestart(t.Context(), taskrunner.TaskHookRequest{})
	if !errors.Is(err, ErrTooLarge) {
		t.Fatalf("err %v, want ErrTooLarge", err)
	}
	if _, err := os.Stat(filepath.Join(f.dirs.TaskDir, "local", "api.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a file was written: %v", err)
	}
}
