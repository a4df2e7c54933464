package logging

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// block makes the log file name at idx one the rotator cannot clear: a
// non-empty directory, as a task writing alloc/logs may plant.
func block(t *testing.T, base string, idx int) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(fileName(base, idx), "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
}

func TestRotatorSkipsBlockedNextFile(t *testing.T) {
	base := filepath.Join(t.TempDir(), "web.stdout")
	r, err := NewRotator(base, 3, 4)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	block(t, base, 1)
	if n, err := r.Write([]byte("abcdefgh")); err != nil || n != 8 {
		t.Fatalf("Write with the next name blocked = %d, %v", n, err)
	}
	for idx, want := range map[int]string{0: "abcd", 2: "efgh"} {
		if got := readFile(t, fileName(base, idx)); got != want {
			t.Errorf("file %d = %q, want %q", idx, got, want)
		}
	}
}

// fakeClock is a Rotator clock the test moves by hand.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestRotatorFailedRotationKeepsWritingAndBacksOff(t *testing.T) {
	base := filepath.Join(t.TempDir(), "web.stdout")
	var logs bytes.Buffer
	logger := hclog.New(&hclog.LoggerOptions{Output: &logs, Level: hclog.Info})
	r, err := NewRotator(base, 3, 4, WithLogger(logger))
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	clock := &fakeClock{t: time.Unix(1e9, 0)}
	r.now = clock.now
	for i := 1; i <= maxSkip; i++ {
		block(t, base, i) // standing for a failure no skipping avoids (ENOSPC...)
	}
	write := func(s string) {
		t.Helper()
		if n, err := r.Write([]byte(s)); err != nil || n != len(s) {
			t.Fatalf("Write(%q) = %d, %v", s, n, err)
		}
	}
	write("abcd")
	write("ef") // rotation fails: kept in file 0, retried in 1s
	clock.t = clock.t.Add(rotateRetryMin)
	write("gh") // retried, fails again: next try in 2s
	for i := 1; i <= maxSkip; i++ {
		if err := os.RemoveAll(fileName(base, i)); err != nil {
			t.Fatal(err)
		}
	}
	clock.t = clock.t.Add(rotateRetryMin)
	write("ij") // not retried yet
	if got := readFile(t, fileName(base, 0)); got != "abcdefghij" {
		t.Fatalf("file 0 = %q, want every write kept in it while rotation failed", got)
	}
	if got := existing(t, base); len(got) != 1 {
		t.Fatalf("files %v: rotation retried before its pause ended", got)
	}
	clock.t = clock.t.Add(rotateRetryMin)
	write("kl")
	if got := readFile(t, fileName(base, 1)); got != "kl" {
		t.Fatalf("file 1 = %q, want %q after the retry", got, "kl")
	}
	if n := strings.Count(logs.String(), "failed to rotate log"); n != 1 {
		t.Errorf("failure logged %d times, want once:\n%s", n, logs.String())
	}
	if !strings.Contains(logs.String(), "log rotation works again") {
		t.Errorf("recovery not logged:\n%s", logs.String())
	}
}

func TestNewRotatorOnFullFileWithBlockedRotation(t *testing.T) {
	base := filepath.Join(t.TempDir(), "web.stdout")
	if err := os.WriteFile(fileName(base, 0), []byte("full"), 0o644); err != nil {
		t.Fatal(err)
	}
	for i := 1; i <= maxSkip; i++ {
		block(t, base, i)
	}
	r, err := NewRotator(base, 3, 4)
	if err != nil {
		t.Fatalf("NewRotator with rotation blocked: %v", err)
	}
	defer r.Close()
	if _, err := r.Write([]byte("more")); err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, fileName(base, 0)); got != "fullmore" {
		t.Fatalf("file 0 = %q, want %q", got, "fullmore")
	}
}
