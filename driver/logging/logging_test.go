package logging

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/meshlet/meshlet/internal/nofollow"
)

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("read %s: %v", path, err)
	}
	return string(b)
}

func existing(t *testing.T, base string) []int {
	t.Helper()
	dir, err := nofollow.OpenDir(filepath.Dir(base))
	if err != nil {
		t.Fatal(err)
	}
	defer dir.Close()
	idxs, err := listIndexesAt(dir, filepath.Base(base)+".")
	if err != nil {
		t.Fatal(err)
	}
	return idxs
}

func TestRotatorRotation(t *testing.T) {
	tests := []struct {
		name     string
		maxFiles int
		maxSize  int64
		writes   []string
		want     map[int]string // remaining files and their content
	}{
		{"fits in one file", 3, 10, []string{"abc", "def"}, map[int]string{0: "abcdef"}},
		{"split across boundary", 3, 4, []string{"abcdefghij"}, map[int]string{0: "abcd", 1: "efgh", 2: "ij"}},
		{"oldest removed", 2, 4, []string{"aaaa", "bbbb", "cccc", "dd"}, map[int]string{2: "cccc", 3: "dd"}},
		{"single file kept", 1, 3, []string{"123456789x"}, map[int]string{3: "x"}},
		{"exact fill opens next lazily", 3, 3, []string{"abc"}, map[int]string{0: "abc"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			base := filepath.Join(t.TempDir(), "web.stdout")
			r, err := NewRotator(base, tc.maxFiles, tc.maxSize)
			if err != nil {
				t.Fatal(err)
			}
			for _, w := range tc.writes {
				n, err := r.Write([]byte(w))
				if err != nil || n != len(w) {
					t.Fatalf("Write(%q) = %d, %v", w, n, err)
				}
			}
			if err := r.Close(); err != nil {
				t.Fatal(err)
			}
			got := existing(t, base)
			if len(got) != len(tc.want) {
				t.Fatalf("files %v, want indexes of %v", got, tc.want)
			}
			for idx, content := range tc.want {
				if c := readFile(t, fileName(base, idx)); c != content {
					t.Errorf("file %d = %q, want %q", idx, c, content)
				}
			}
		})
	}
}

func TestRotatorResumesHighestFile(t *testing.T) {
	base := filepath.Join(t.TempDir(), "logs", "web.stderr")
	r, err := NewRotator(base, 5, 6)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Write([]byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	r.Close()
	if _, err := r.Write([]byte("x")); !errors.Is(err, ErrClosed) {
		t.Fatalf("write after close: %v, want ErrClosed", err)
	}
	r2, err := NewRotator(base, 5, 6)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r2.Write([]byte("abcd")); err != nil {
		t.Fatal(err)
	}
	r2.Close()
	if got := readFile(t, fileName(base, 1)); got != "6789ab" {
		t.Fatalf("resumed file = %q, want %q", got, "6789ab")
	}
	if got := readFile(t, fileName(base, 2)); got != "cd" {
		t.Fatalf("next file = %q, want %q", got, "cd")
	}
}

func TestRotatorBadInput(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		files int
		size  int64
	}{{0, 10}, {1, 0}, {-1, -1}} {
		if _, err := NewRotator(filepath.Join(dir, "x.stdout"), tc.files, tc.size); err == nil {
			t.Errorf("NewRotator(%d, %d) succeeded", tc.files, tc.size)
		}
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 0 {
		t.Fatalf("bad input left files behind: %v", entries)
	}
}

// writeRotated writes content through a rotator and returns the remaining
// content in order.
func writeRotated(t *testing.T, dir string, maxFiles int, size int64, content string) *Rotator {
	t.Helper()
	r, err := NewRotator(filepath.Join(dir, "web.stdout"), maxFiles, size)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r.Write([]byte(content)); err != nil {
		t.Fatal(err)
	}
	return r
}

func TestReaderAcrossRotation(t *testing.T) {
	dir := t.TempDir()
	r := writeRotated(t, dir, 3, 4, "aaaabbbbccccdd") // files 1..3 remain: bbbb cccc dd
	defer r.Close()
	tests := []struct {
		origin string
		offset int64
		want   string
	}{
		{OriginStart, 0, "bbbbccccdd"},
		{OriginStart, 5, "cccdd"},
		{OriginStart, 4, "ccccdd"},
		{OriginStart, 100, ""},
		{OriginEnd, 0, ""},
		{OriginEnd, 3, "cdd"},
		{OriginEnd, 6, "ccccdd"},
		{OriginEnd, 100, "bbbbccccdd"},
	}
	for _, tc := range tests {
		rd, err := NewReader(dir, "web", "stdout", tc.origin, tc.offset, false)
		if err != nil {
			t.Fatalf("%s/%d: %v", tc.origin, tc.offset, err)
		}
		b, err := io.ReadAll(rd)
		rd.Close()
		if err != nil || string(b) != tc.want {
			t.Errorf("%s/%d: got %q, %v; want %q", tc.origin, tc.offset, b, err, tc.want)
		}
	}
}

func TestReaderBadInput(t *testing.T) {
	dir := t.TempDir()
	tests := []struct {
		task, stream, origin string
		offset               int64
		want                 string
	}{
		{"web", "stdin", OriginStart, 0, "stream"},
		{"web", "stdout", "middle", 0, "origin"},
		{"web", "stdout", OriginStart, -1, "offset"},
		{"../etc", "stdout", OriginStart, 0, "task name"},
		{"web", "stdout", OriginStart, 0, "no log files"},
	}
	for _, tc := range tests {
		_, err := NewReader(dir, tc.task, tc.stream, tc.origin, tc.offset, false)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("NewReader(%q,%q,%q,%d) = %v, want error mentioning %q", tc.task, tc.stream, tc.origin, tc.offset, err, tc.want)
		}
	}
	if _, err := NewReader(dir, "web", "stdout", OriginStart, 0, false); !errors.Is(err, ErrNoLogs) {
		t.Fatalf("missing logs: %v, want ErrNoLogs", err)
	}
}

// readUntil reads from rd in a goroutine-free loop until want is collected.
func readUntil(t *testing.T, rd io.Reader, want string) {
	t.Helper()
	var got bytes.Buffer
	buf := make([]byte, 3)
	deadline := time.Now().Add(10 * time.Second)
	for got.Len() < len(want) && time.Now().Before(deadline) {
		n, err := rd.Read(buf)
		got.Write(buf[:n])
		if err != nil {
			t.Fatalf("read: %v (got %q)", err, got.String())
		}
	}
	if got.String() != want {
		t.Fatalf("followed %q, want %q", got.String(), want)
	}
}

func TestReaderFollowAcrossRotation(t *testing.T) {
	dir := t.TempDir()
	w := writeRotated(t, dir, 10, 5, "hello")
	defer w.Close()
	rd, err := NewReader(dir, "web", "stdout", OriginStart, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	readUntil(t, rd, "hello")
	// Written after the reader started, spanning three more files.
	if _, err := w.Write([]byte(" world, rotated!")); err != nil {
		t.Fatal(err)
	}
	readUntil(t, rd, " world, rotated!")
	if got := existing(t, filepath.Join(dir, "web.stdout")); len(got) != 5 {
		t.Fatalf("expected 5 rotated files, have %v", got)
	}
	closed := make(chan error, 1)
	go func() {
		_, err := rd.Read(make([]byte, 8)) // blocks: no new data
		closed <- err
	}()
	time.Sleep(2 * pollInterval)
	if err := rd.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-closed:
		if !errors.Is(err, io.EOF) {
			t.Fatalf("blocked read ended with %v, want io.EOF", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not unblock a following Read")
	}
}

func TestReaderFollowWaitsForFirstFile(t *testing.T) {
	dir := t.TempDir()
	rd, err := NewReader(dir, "web", "stderr", OriginEnd, 0, true)
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	w, err := NewRotator(filepath.Join(dir, "web.stderr"), 10, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Write([]byte("late output")); err != nil {
		t.Fatal(err)
	}
	readUntil(t, rd, "late output")
}

func BenchmarkRotatorWrite(b *testing.B) {
	r, err := NewRotator(filepath.Join(b.TempDir(), "bench.stdout"), 3, 1<<20)
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	line := bytes.Repeat([]byte("x"), 4095)
	line = append(line, '\n')
	b.SetBytes(int64(len(line)))
	for b.Loop() {
		if _, err := r.Write(line); err != nil {
			b.Fatal(err)
		}
	}
}

func TestRotatorSkipsFullNextFile(t *testing.T) {
	base := filepath.Join(t.TempDir(), "web.stdout")
	r, err := NewRotator(base, 5, 8)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	// A file larger than max_file_size already sits at the next index.
	if err := os.WriteFile(fileName(base, 1), []byte("0123456789"), 0o644); err != nil {
		t.Fatal(err)
	}
	if n, err := r.Write([]byte("abcdefghXY")); err != nil || n != 10 {
		t.Fatalf("Write = %d, %v", n, err)
	}
	for idx, want := range map[int]string{0: "abcdefgh", 1: "0123456789", 2: "XY"} {
		if got := readFile(t, fileName(base, idx)); got != want {
			t.Errorf("file %d = %q, want %q", idx, got, want)
		}
	}
}

// plant puts something other than a regular file at path, as a task that
// can write alloc/logs may, and returns the host file a symlink points at.
func plant(t *testing.T, kind, path string) (host string) {
	t.Helper()
	host = filepath.Join(t.TempDir(), "host-file")
	if err := os.WriteFile(host, []byte("host\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var err error
	switch kind {
	case "symlink":
		err = os.Symlink(host, path)
	case "dangling symlink":
		err = os.Symlink(filepath.Join(filepath.Dir(host), "new-host-file"), path)
	case "dir symlink":
		err = os.Symlink(filepath.Dir(host), path)
	case "fifo":
		err = unix.Mkfifo(path, 0o644)
	case "dir":
		err = os.Mkdir(path, 0o755)
	default:
		t.Fatalf("unknown kind %q", kind)
	}
	if err != nil {
		t.Fatal(err)
	}
	return host
}

var plantedKinds = []string{"symlink", "dangling symlink", "dir symlink", "fifo", "dir"}

// within runs f and fails the test if it has not returned within 5s (an open
// blocked on a planted FIFO).
func within(t *testing.T, what string, f func() error) error {
	t.Helper()
	errc := make(chan error, 1)
	go func() { errc <- f() }()
	select {
	case err := <-errc:
		return err
	case <-time.After(5 * time.Second):
		t.Fatalf("%s blocked", what)
		return nil
	}
}

// checkHostUntouched fails the test if a planted link led a write outside
// the log directory.
func checkHostUntouched(t *testing.T, host string) {
	t.Helper()
	if got := readFile(t, host); got != "host\n" {
		t.Errorf("host file = %q: written through a planted link", got)
	}
	if _, err := os.Lstat(filepath.Join(filepath.Dir(host), "new-host-file")); err == nil {
		t.Errorf("a planted dangling link created a host file")
	}
}

func TestRotatorReplacesPlantedNextFile(t *testing.T) {
	for _, kind := range plantedKinds {
		t.Run(kind, func(t *testing.T) {
			base := filepath.Join(t.TempDir(), "web.stdout")
			r, err := NewRotator(base, 3, 8)
			if err != nil {
				t.Fatal(err)
			}
			host := plant(t, kind, fileName(base, 1))
			err = within(t, "Write", func() error {
				_, err := r.Write([]byte("12345678INJECTED"))
				return err
			})
			if err != nil {
				t.Fatalf("Write: %v", err)
			}
			r.Close()
			checkHostUntouched(t, host)
			st, err := os.Lstat(fileName(base, 1))
			if err != nil {
				t.Fatal(err)
			}
			if !st.Mode().IsRegular() {
				t.Fatalf("file 1 has mode %v, want a regular file", st.Mode())
			}
			if got := readFile(t, fileName(base, 1)); got != "INJECTED" {
				t.Errorf("file 1 = %q, want %q", got, "INJECTED")
			}
		})
	}
}

func TestRotatorIgnoresPlantedHighestFile(t *testing.T) {
	for _, kind := range plantedKinds {
		t.Run(kind, func(t *testing.T) {
			dir := t.TempDir()
			base := filepath.Join(dir, "web.stdout")
			if err := os.WriteFile(fileName(base, 0), []byte("old\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			host := plant(t, kind, fileName(base, 7))
			var r *Rotator
			err := within(t, "NewRotator", func() (err error) {
				r, err = NewRotator(base, 3, 64)
				return err
			})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := r.Write([]byte("new\n")); err != nil {
				t.Fatalf("Write: %v", err)
			}
			r.Close()
			checkHostUntouched(t, host)
			if got := readFile(t, fileName(base, 0)); got != "old\nnew\n" {
				t.Errorf("file 0 = %q, want the resumed %q", got, "old\nnew\n")
			}
		})
	}
}

func TestRotatorRefusesLinkedDirectory(t *testing.T) {
	dir := t.TempDir()
	host := t.TempDir()
	if err := os.Symlink(host, filepath.Join(dir, "logs")); err != nil {
		t.Fatal(err)
	}
	if r, err := NewRotator(filepath.Join(dir, "logs", "web.stdout"), 3, 8); err == nil {
		r.Close()
		t.Fatal("NewRotator through a linked log directory succeeded")
	}
	if entries, _ := os.ReadDir(host); len(entries) != 0 {
		t.Fatalf("files created through the link: %v", entries)
	}
}
