package docker

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"math"
	"os"
	"path/filepath"
	"strings"
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
	c[streamStdout] = cursorPos{t1, 3}
	if !c.since().IsZero() {
		t.Error("a cursor without stderr must resume from the start")
	}
	c[streamStderr] = cursorPos{t0, 1}
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
	// A cursor written before counts existed: every message of its
	// timestamp was copied.
	if err := os.WriteFile(path, []byte("stdout "+t1.Format(time.RFC3339Nano)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := readCursor(path)[streamStdout]; !got.t.Equal(t1) || got.n != math.MaxInt {
		t.Errorf("old cursor line read as %+v", got)
	}
}

// frame appends one multiplexed log frame: "<ts> msg" on stream.
func frame(b *bytes.Buffer, stream byte, ts time.Time, msg string) {
	m := ts.Format(time.RFC3339Nano) + " " + msg
	hdr := [8]byte{stream}
	binary.BigEndian.PutUint32(hdr[4:], uint32(len(m)))
	b.Write(hdr[:])
	b.WriteString(m)
}

// TestPartialLines: Docker splits a line longer than 16 KiB into partial
// messages sharing the first one's timestamp. All of them are copied, and
// a re-attach that resumes in the middle of them (since is inclusive)
// copies only the rest.
func TestPartialLines(t *testing.T) {
	t0 := time.Date(2026, 12, 6, 1, 0, 0, 0, time.UTC)
	all := func() *bytes.Buffer {
		var b bytes.Buffer
		frame(&b, streamStdout, t0, "AAAA")
		frame(&b, streamStdout, t0, "BBBB")
		frame(&b, streamStdout, t0, "CCCC\n")
		frame(&b, streamStdout, t0.Add(time.Millisecond), "next\n")
		return &b
	}
	newCopier := func(cursorFile string) (*logCopier, *bytes.Buffer) {
		out := &bytes.Buffer{}
		lc := &logCopier{h: &taskHandle{st: &driverState{CursorFile: cursorFile}}, stdout: nopCloser{out}, stderr: nopCloser{&bytes.Buffer{}},
			pos: readCursor(cursorFile)}
		return lc, out
	}
	file := filepath.Join(t.TempDir(), "cursor")
	lc, out := newCopier(file)
	if err := lc.demux(all()); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "AAAABBBBCCCC\nnext\n"; got != want {
		t.Fatalf("stdout = %q, want %q", got, want)
	}

	// An agent that copied two of the three partials and saved its cursor
	// re-attaches from t0: only the rest is copied.
	if err := writeCursor(file, cursor{streamStdout: {t0, 2}}); err != nil {
		t.Fatal(err)
	}
	lc, out = newCopier(file)
	if err := lc.demux(all()); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "CCCC\nnext\n"; got != want {
		t.Fatalf("after a re-attach: stdout = %q, want %q", got, want)
	}
}

// TestPartialLinesTTY: in a terminal's stream the partial messages follow
// each other without a newline, each with its timestamp: the line is
// copied once, without the inner timestamps.
func TestPartialLinesTTY(t *testing.T) {
	ts := time.Date(2026, 12, 6, 1, 0, 0, 0, time.UTC).Format(time.RFC3339Nano)
	out := &bytes.Buffer{}
	lc := &logCopier{h: &taskHandle{st: &driverState{CursorFile: filepath.Join(t.TempDir(), "cursor")}}, stdout: nopCloser{out}, stderr: nopCloser{&bytes.Buffer{}}}
	in := ts + " AAAA" + ts + " BBBB" + ts + " CCCC\n" + ts + " same second, other line\n"
	if err := lc.raw(bufio.NewReader(strings.NewReader(in))); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "AAAABBBBCCCC\nsame second, other line\n"; got != want {
		t.Fatalf("stdout = %q, want %q", got, want)
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
