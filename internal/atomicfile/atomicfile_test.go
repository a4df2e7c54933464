package atomicfile

import (
	"errors"
	"os"
	"path/filepath"
	"testing"
)

func TestWriteFileReplacesAndSetsMode(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := WriteFile(path, []byte("old"), 0o600); err != nil {
		t.Fatalf("first write: %v", err)
	}
	if err := WriteFile(path, []byte("new"), 0o640); err != nil {
		t.Fatalf("second write: %v", err)
	}
	got, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if string(got) != "new" {
		t.Fatalf("content = %q, want %q", got, "new")
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o640 {
		t.Fatalf("mode = %v, want 0640", fi.Mode().Perm())
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 {
		t.Fatalf("directory holds %d entries, want only the target (temp files left behind?)", len(entries))
	}
}

func TestWriteFileFailureLeavesTargetUntouched(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "state.json")
	if err := WriteFile(path, []byte("keep"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Renaming a file over a non-empty directory fails after the temp file
	// was written: the temp file must go and nothing else may change.
	blocker := filepath.Join(dir, "blocker")
	if err := os.MkdirAll(filepath.Join(blocker, "child"), 0o700); err != nil {
		t.Fatal(err)
	}
	err := WriteFile(blocker, []byte("x"), 0o600)
	if err == nil {
		t.Fatal("write over a non-empty directory succeeded")
	}
	if got, _ := os.ReadFile(path); string(got) != "keep" {
		t.Fatalf("unrelated target changed: %q", got)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 2 {
		t.Fatalf("directory holds %d entries after a failed write, want 2 (temp file left?)", len(entries))
	}
}

func TestWriteFileMissingDir(t *testing.T) {
	err := WriteFile(filepath.Join(t.TempDir(), "nope", "f"), []byte("x"), 0o600)
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("err = %v, want one wrapping os.ErrNotExist", err)
	}
}

// A temp file left by an interrupted write names the file it was writing.
func TestTempTarget(t *testing.T) {
	dir := t.TempDir()
	f, err := os.CreateTemp(dir, tempPrefix+"abc-123.json-*")
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
	if got, ok := TempTarget(filepath.Base(f.Name())); !ok || got != "abc-123.json" {
		t.Fatalf("TempTarget(%q) = %q, %v; want abc-123.json", filepath.Base(f.Name()), got, ok)
	}
	for _, name := range []string{"abc-123.json", "x.tmp", "tmp-a-1"} {
		if got, ok := TempTarget(name); ok {
			t.Errorf("TempTarget(%q) = %q, true; want not a temp file", name, got)
		}
	}
	if got, ok := TempTarget(".tmp-x"); !ok || got != "" {
		t.Errorf(`TempTarget(".tmp-x") = %q, %v; want a temp file of unknown target`, got, ok)
	}
}
