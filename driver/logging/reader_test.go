package logging

import (
	"io"
	"os"
	"path/filepath"
	"testing"
)

// readAllWithin opens the task's stdout in dir at (origin, offset) and reads
// it to the end, failing the test if that blocks.
func readAllWithin(t *testing.T, dir, origin string, offset int64) string {
	t.Helper()
	var b []byte
	err := within(t, "reading the logs", func() error {
		rd, err := NewReader(dir, "web", "stdout", origin, offset, false)
		if err != nil {
			return err
		}
		defer rd.Close()
		b, err = io.ReadAll(rd)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestReaderSkipsPlantedFiles(t *testing.T) {
	for _, kind := range plantedKinds {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			base := filepath.Join(dir, "web.stdout")
			for idx, content := range map[int]string{0: "zero\n", 2: "two\n"} {
				if err := os.WriteFile(fileName(base, idx), []byte(content), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			host := plant(t, kind, fileName(base, 1))
			if err := os.WriteFile(host, []byte("secret\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if got := readAllWithin(t, dir, OriginStart, 0); got != "zero\ntwo\n" {
				t.Errorf("read %q, want %q", got, "zero\ntwo\n")
			}
		})
	}
}

func TestReaderIgnoresPlantedNewestFile(t *testing.T) {
	for _, kind := range plantedKinds {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			base := filepath.Join(dir, "web.stdout")
			if err := os.WriteFile(fileName(base, 0), []byte("log\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			host := plant(t, kind, fileName(base, 9))
			if err := os.WriteFile(host, []byte("secret\n"), 0o600); err != nil {
				t.Fatal(err)
			}
			if got := readAllWithin(t, dir, OriginEnd, 4); got != "log\n" {
				t.Errorf("read %q, want %q", got, "log\n")
			}
		})
	}
}

func TestReaderRefusesLinkedDirectory(t *testing.T) {
	host := t.TempDir()
	if err := os.WriteFile(filepath.Join(host, "web.stdout.0"), []byte("secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	logs := filepath.Join(t.TempDir(), "logs")
	if err := os.Symlink(host, logs); err != nil {
		t.Fatal(err)
	}
	if rd, err := NewReader(logs, "web", "stdout", OriginStart, 0, false); err == nil {
		b, _ := io.ReadAll(rd)
		rd.Close()
		t.Fatalf("NewReader through a linked log directory succeeded, read %q", b)
	}
}

// A regular file planted at an index no rotation reaches is not continued
// (the next index would overflow and the task's own files be purged).
func TestRotatorIgnoresHugePlantedIndex(t *testing.T) {
	dir := t.TempDir()
	base := filepath.Join(dir, "web.stdout")
	if err := os.WriteFile(fileName(base, 0), []byte("old\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(base+".9223372036854775807", []byte("planted\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := NewRotator(base, 3, 64)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Write([]byte("new\n")); err != nil {
		t.Fatalf("Write: %v", err)
	}
	r.Close()
	if got := readFile(t, fileName(base, 0)); got != "old\nnew\n" {
		t.Errorf("file 0 = %q, want the resumed %q", got, "old\nnew\n")
	}
}
