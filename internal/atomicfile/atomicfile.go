// Package atomicfile replaces files so that a crash leaves either the old or
// the new content, never a torn mix: data goes to a temp file in the same
// directory, is fsynced, renamed over the target, and the directory is
// fsynced so the rename itself survives a power loss.
//
// It is safe for concurrent use on different paths; callers serialize writes
// to one path themselves.
package atomicfile

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// tempPrefix starts the name of WriteFile's temp files:
// ".tmp-<target>-<random>" in the target's directory.
const tempPrefix = ".tmp-"

// TempTarget tells whether name (a base name) is a temp file of WriteFile
// and, if so, the base name of the file it was writing ("" when the name
// cannot say). A crash can leave such a file behind; its owner removes it.
func TempTarget(name string) (target string, ok bool) {
	rest, ok := strings.CutPrefix(name, tempPrefix)
	if !ok {
		return "", false
	}
	if i := strings.LastIndexByte(rest, '-'); i > 0 {
		return rest[:i], true
	}
	return "", true
}

// WriteFile atomically replaces path with data, created with perm. On any
// error the target is untouched and the temp file is removed.
func WriteFile(path string, data []byte, perm os.FileMode) (err error) {
	dir := filepath.Dir(path)
	f, err := os.CreateTemp(dir, tempPrefix+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("failed to create temp file for %s: %w", path, err)
	}
	tmp := f.Name()
	defer func() {
		if err != nil {
			_ = f.Close()
			_ = os.Remove(tmp)
		}
	}()
	if err = f.Chmod(perm); err != nil {
		return fmt.Errorf("failed to chmod %s: %w", tmp, err)
	}
	if _, err = f.Write(data); err != nil {
		return fmt.Errorf("failed to write %s: %w", tmp, err)
	}
	if err = f.Sync(); err != nil {
		return fmt.Errorf("failed to sync %s: %w", tmp, err)
	}
	if err = f.Close(); err != nil {
		return fmt.Errorf("failed to close %s: %w", tmp, err)
	}
	if err = os.Rename(tmp, path); err != nil {
		return fmt.Errorf("failed to rename %s over %s: %w", tmp, path, err)
	}
	if err = SyncDir(dir); err != nil {
		return err
	}
	return nil
}

// SyncDir fsyncs a directory so that entries created, renamed or removed in
// it are durable.
func SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return fmt.Errorf("failed to open directory %s: %w", dir, err)
	}
	defer d.Close()
	if err := d.Sync(); err != nil {
		return fmt.Errorf("failed to sync directory %s: %w", dir, err)
	}
	return nil
}
