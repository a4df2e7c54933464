package docker

import (
	"path/filepath"
	"testing"
	"time"
)

func TestCursor(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 1, 0, 0, 123456789, time.UTC)
	t1 := t0.Add(time.Millisecond)
	var c cursor
	if !c.since().IsZero() {
		t.Error("empty cursor resumes from a time")
	}
	c[streamStdout] = t1
	if !c.since().IsZero() {
		t.Error("a cursor without stderr must resume from the start")
	}
	c[streamStderr] = t0
	if !c.since().Equal(t0) {
		t.Errorf("since = %v, want the earlier stream's %v", c.since(), t0)
	}
	path := filepath.Join(t.TempDir(), "c")
	if err := writeCursor(path, c); err != nil {
		t.Fatal(err)
	}
	if got := readCursor(path); !got.equal(c) {
		t.Errorf("read back %v, want %v", got, c)
	}
	if got := readCursor(path + ".missing"); !got.since().IsZero() {
		t.Errorf("missing cursor file = %v", got)
	}
}
