// Package allocdir owns an allocation's directory tree on the client, laid
// out like Nomad's:
//
//	<data_dir>/alloc/<alloc-id>/
//	  alloc/         shared by the group's tasks (NOMAD_ALLOC_DIR)
//	    logs/        <task>.stdout.N / <task>.stderr.N
//	    tmp/  data/
//	  <task>/
//	    local/       NOMAD_TASK_DIR
//	    secrets/     NOMAD_SECRETS_DIR, mode 0700
//	    tmp/
//
// Build is idempotent (an agent restart calls it again); Destroy removes the
// tree. An AllocDir is plain data plus file-system calls: callers serialize
// Build and Destroy of the same allocation (the alloc runner does).
package allocdir

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
)

// AllocDir is one allocation's directory tree.
type AllocDir struct {
	// Dir is <root>/<alloc-id>.
	Dir string
	// SharedDir is Dir/alloc, LogDir Dir/alloc/logs.
	SharedDir string
	LogDir    string
}

// TaskDir is one task's directories.
type TaskDir struct {
	Dir        string
	LocalDir   string
	SecretsDir string
	TmpDir     string
	// LogDir is the allocation's shared log directory.
	LogDir string
}

// New returns the layout of allocID under root (<data_dir>/alloc); nothing
// is created until Build.
func New(root, allocID string) *AllocDir {
	dir := filepath.Join(root, allocID)
	shared := filepath.Join(dir, "alloc")
	return &AllocDir{Dir: dir, SharedDir: shared, LogDir: filepath.Join(shared, "logs")}
}

// TaskDir returns the layout of a task's directories.
func (d *AllocDir) TaskDir(task string) TaskDir {
	dir := filepath.Join(d.Dir, task)
	return TaskDir{Dir: dir, LocalDir: filepath.Join(dir, "local"), SecretsDir: filepath.Join(dir, "secrets"),
		TmpDir: filepath.Join(dir, "tmp"), LogDir: d.LogDir}
}

// Build creates the shared directories and every task's directories.
// Task names must be plain names (no path separators, not "alloc").
func (d *AllocDir) Build(tasks []string) error {
	dirs := map[string]os.FileMode{
		d.Dir: 0o755, d.SharedDir: 0o755, d.LogDir: 0o755,
		filepath.Join(d.SharedDir, "tmp"): 0o777 | os.ModeSticky, filepath.Join(d.SharedDir, "data"): 0o755,
	}
	for _, t := range tasks {
		if t == "" || t == "alloc" || t == "." || t == ".." || filepath.Base(t) != t {
			return fmt.Errorf("failed to build task directory: invalid task name %q", t)
		}
		td := d.TaskDir(t)
		dirs[td.Dir] = 0o755
		dirs[td.LocalDir] = 0o755
		dirs[td.SecretsDir] = 0o700
		dirs[td.TmpDir] = 0o777 | os.ModeSticky
	}
	for _, p := range slices.Sorted(maps.Keys(dirs)) { // parents sort before their children
		if err := os.MkdirAll(p, 0o755); err != nil {
			return fmt.Errorf("failed to create %s: %w", p, err)
		}
		// MkdirAll honours the umask; set the intended mode explicitly.
		if err := os.Chmod(p, dirs[p]); err != nil {
			return fmt.Errorf("failed to set mode of %s: %w", p, err)
		}
	}
	return nil
}

// Destroy removes the allocation's tree; a missing tree is not an error.
func (d *AllocDir) Destroy() error {
	if err := os.RemoveAll(d.Dir); err != nil {
		return fmt.Errorf("failed to remove alloc dir %s: %w", d.Dir, err)
	}
	return nil
}

// Exists reports whether the tree was built.
func (d *AllocDir) Exists() bool {
	_, err := os.Stat(d.SharedDir)
	return err == nil
}
