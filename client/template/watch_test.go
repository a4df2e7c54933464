package template

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/meshlet/meshlet/structs"
)

// The file poll is not a change: a template reading a file whose wait.min
// is longer than the poll period picks a change up after wait.min, not
// after wait.max (each poll used to push its quiet period back).
func TestFilePollDoesNotDeferToWaitMax(t *testing.T) {
	tm := fastTmpl("restart")
	tm.EmbeddedTmpl = sp(`cfg={{ file "local/in.txt" }}`)
	tm.Wait = &structs.WaitConfig{Min: sp(200 * time.Millisecond), Max: sp(4 * time.Second)}
	f := newFixture(t, tm) // polls every 50ms
	in := filepath.Join(f.dirs.TaskDir, "local", "in.txt")
	if err := os.MkdirAll(filepath.Dir(in), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(in, []byte("one"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.prestart(t, f.hook, false)
	if err := os.WriteFile(in, []byte("two"), 0o644); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out := f.hook.tmpls[0].out.path()
	eventually(t, "the re-render", func() bool { return read(t, out) == "cfg=two" })
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("re-rendered after %v: the wait.max, not the wait.min", d)
	}
}
