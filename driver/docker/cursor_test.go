package docker

import (
	"bytes"
	"encoding/binary"
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

type nopCloser struct{ *bytes.Buffer }

func (nopCloser) Close() error { return nil }

// A cursor that cannot be saved (its directory is gone, as on a full or
// broken disk) does not stop the copy: every line is still written, and
// the error is kept for the log.
func TestCursorSaveFailureKeepsCopying(t *testing.T) {
	out, errw := nopCloser{&bytes.Buffer{}}, nopCloser{&bytes.Buffer{}}
	lc := &logCopier{h: &taskHandle{st: &driverState{CursorFile: filepath.Join(t.TempDir(), "gone", "cursor")}},
		stdout: out, stderr: errw}
	var frames bytes.Buffer
	t0 := time.Date(2026, 12, 6, 1, 0, 0, 0, time.UTC)
	for i, line := range []string{"one\n", "two\n", "three\n"} {
		msg := t0.Add(time.Duration(i)*time.Second).Format(time.RFC3339Nano) + " " + line
		hdr := [8]byte{1}
		binary.BigEndian.PutUint32(hdr[4:], uint32(len(msg)))
		frames.Write(hdr[:])
		frames.WriteString(msg)
	}
	if err := lc.demux(&frames); err != nil {
		t.Fatalf("demux: %v", err)
	}
	if got := out.String(); got != "one\ntwo\nthree\n" {
		t.Fatalf("stdout = %q", got)
	}
	if lc.saveErr == nil {
		t.Fatal("the cursor's save failure was not kept")
	}
}
