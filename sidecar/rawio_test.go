package sidecar

import (
	"bytes"
	"errors"
	"io"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// rawPair is a loopback TCP pair with raw I/O on both ends.
func rawPair(t *testing.T) (*rawTCP, *rawTCP) {
	t.Helper()
	a, b := tcpPair(t)
	ra, ok := withRawIO(a).(*rawTCP)
	rb, ok2 := withRawIO(b).(*rawTCP)
	if !ok || !ok2 {
		t.Fatalf("withRawIO did not wrap TCP connections: %T %T", withRawIO(a), withRawIO(b))
	}
	return ra, rb
}

// Large writes both ways (more than the socket buffers hold, so they meet
// EAGAIN and wait for writability) complete byte for byte.
func TestRawTCPRoundTripsLargeWrites(t *testing.T) {
	a, b := rawPair(t)
	ab, ba := randomBytes(t, 32<<20), randomBytes(t, 12<<20)
	gotB, gotA := readAsync(b, len(ab)), readAsync(a, len(ba))
	errs := make(chan error, 2)
	go func() { _, err := a.Write(ab); errs <- err }()
	go func() { _, err := b.Write(ba); errs <- err }()
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatalf("write: %v", err)
		}
	}
	if !bytes.Equal(receive(t, gotB), ab) || !bytes.Equal(receive(t, gotA), ba) {
		t.Fatal("data differs after a raw round trip")
	}
}

func TestRawTCPEOFDeadlineAndClose(t *testing.T) {
	a, b := rawPair(t)
	if n, err := a.Read(nil); n != 0 || err != nil {
		t.Fatalf("empty read = %d, %v", n, err)
	}

	// A passed read deadline is a timeout, as for a *net.TCPConn.
	_ = a.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	_, err := a.Read(make([]byte, 1))
	var ne net.Error
	if !errors.Is(err, os.ErrDeadlineExceeded) || !errors.As(err, &ne) || !ne.Timeout() {
		t.Fatalf("read past deadline = %v, want a timeout", err)
	}
	_ = a.SetReadDeadline(time.Time{})

	// The peer's FIN is io.EOF once the data before it is read.
	if _, err := b.Write([]byte("bye")); err != nil {
		t.Fatal(err)
	}
	if err := b.CloseWrite(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(a)
	if err != nil || string(got) != "bye" {
		t.Fatalf("ReadAll = %q, %v; want \"bye\" then EOF", got, err)
	}

	// Closing a connection wakes its blocked reader with net.ErrClosed.
	done := make(chan error, 1)
	go func() { _, err := b.Read(make([]byte, 1)); done <- err }()
	time.Sleep(20 * time.Millisecond)
	b.Close()
	select {
	case err := <-done:
		if !errors.Is(err, net.ErrClosed) {
			t.Fatalf("read after close = %v, want net.ErrClosed", err)
		}
	case <-time.After(waitTimeout):
		t.Fatal("blocked read not woken by Close")
	}
}

// A write to a connection the peer reset fails with the errno in a
// *net.OpError, like the standard library's.
func TestRawTCPWriteAfterReset(t *testing.T) {
	a, b := rawPair(t)
	if err := b.TCPConn.SetLinger(0); err != nil {
		t.Fatal(err)
	}
	b.Close() // RST
	var err error
	for i := 0; i < 100 && err == nil; i++ {
		_, err = a.Write([]byte("x"))
		time.Sleep(time.Millisecond)
	}
	var oe *net.OpError
	if !errors.As(err, &oe) || oe.Op != "write" ||
		!(errors.Is(err, syscall.ECONNRESET) || errors.Is(err, syscall.EPIPE)) {
		t.Fatalf("write after reset = %v, want a write OpError with ECONNRESET or EPIPE", err)
	}
}

// Non-TCP connections are left alone, and the splice path still finds the
// TCP connection under a raw one.
func TestWithRawIOOnlyWrapsTCP(t *testing.T) {
	p, q := net.Pipe()
	defer p.Close()
	defer q.Close()
	if withRawIO(p) != p {
		t.Fatal("withRawIO wrapped a pipe")
	}
	if _, ok := tcpConnOf(p); ok {
		t.Fatal("tcpConnOf found TCP under a pipe")
	}
	a, _ := rawPair(t)
	if tc, ok := tcpConnOf(a); !ok || tc != a.TCPConn {
		t.Fatal("tcpConnOf did not unwrap a raw TCP connection")
	}
}
