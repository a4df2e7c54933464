package proc

import (
	"errors"
	"io/fs"
	"path/filepath"
	"testing"

	"github.com/meshlet/meshlet/driver"
)

// An executor that ended without an exit file yields an exit error that
// wraps both the missing file and why it was looked for.
func TestExitFromFileKeepsCause(t *testing.T) {
	cause := errors.New("executor wait failed")
	h := newHandle(&driver.TaskConfig{ID: "t1"}, &driverState{ExitFile: filepath.Join(t.TempDir(), "exit.json")})
	res, _ := h.exitFromFile(cause)
	if res.ExitCode != -1 || !errors.Is(res.Err, fs.ErrNotExist) || !errors.Is(res.Err, cause) {
		t.Fatalf("exit = %+v (%v); want code -1 wrapping fs.ErrNotExist and the cause", res, res.Err)
	}
}
