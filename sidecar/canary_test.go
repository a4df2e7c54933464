package sidecar

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Canaries: the default data path relies on behaviour of crypto/tls and of
// the runtime that their documentation does not promise. Each test below
// checks one such property through the real packages over real sockets.
// If one fails after a Go upgrade, run sidecars with
// MESHLET_PROXY_PLAIN_IO=1 (Config.PlainIO) until the data path is fixed.

// recordTap is a connection under a tls.Client that, while tapping,
// keeps the bytes crypto/tls writes instead of sending them, so a test
// can deliver a record piece by piece.
type recordTap struct {
	net.Conn
	mu     sync.Mutex
	tap    bool
	tapped bytes.Buffer
}

func (r *recordTap) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.tap {
		return r.tapped.Write(p)
	}
	return r.Conn.Write(p)
}

// record returns the one TLS record crypto/tls writes for msg.
func (r *recordTap) record(t *testing.T, cli *tls.Conn, msg []byte) []byte {
	t.Helper()
	r.mu.Lock()
	r.tap = true
	r.tapped.Reset()
	r.mu.Unlock()
	if _, err := cli.Write(msg); err != nil {
		t.Fatalf("write: %v", err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.tap = false
	rec := bytes.Clone(r.tapped.Bytes())
	if len(rec) < 6 || rec[0] != 23 || int(rec[3])<<8|int(rec[4]) != len(rec)-5 {
		t.Fatalf("test setup: %d-byte message did not become one application data record (%d bytes)", len(msg), len(rec))
	}
	return rec
}

// socketQueued is the number of bytes waiting in c's socket receive queue.
func socketQueued(t *testing.T, c net.Conn) int {
	t.Helper()
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		t.Fatalf("no raw conn: %v", err)
	}
	var n int
	var ierr error
	if err := rc.Control(func(fd uintptr) { n, ierr = unix.IoctlGetInt(int(fd), unix.SIOCINQ) }); err != nil || ierr != nil {
		t.Fatalf("SIOCINQ: %v %v", err, ierr)
	}
	return n
}

func waitQueued(t *testing.T, c net.Conn, want int) {
	t.Helper()
	deadline := time.Now().Add(waitTimeout)
	for socketQueued(t, c) != want {
		if time.Now().After(deadline) {
			t.Fatalf("socket never had %d bytes queued (has %d)", want, socketQueued(t, c))
		}
		time.Sleep(time.Millisecond)
	}
}

// crypto/tls keeps a partly received record when a read of the
// connection under it fails with a temporary net.Error, and decrypts it
// once the rest arrives. tlsTransport.pollRead (errWouldBlock) and the
// relays' idle read deadline (os.ErrDeadlineExceeded, see copyBuffered)
// both depend on it: were the partial record dropped, or the error made
// permanent, TLS streams would break or be cut.
func TestCanaryTLSKeepsPartialRecordOnTemporaryError(t *testing.T) {
	interrupts := []struct {
		name string
		read func(tr *tlsTransport, srv *tls.Conn, p []byte) (int, error)
		want error
	}{
		{"would block", func(tr *tlsTransport, srv *tls.Conn, p []byte) (int, error) {
			return tr.pollRead(srv, p)
		}, errWouldBlock},
		{"read deadline", func(_ *tlsTransport, srv *tls.Conn, p []byte) (int, error) {
			_ = srv.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
			defer srv.SetReadDeadline(time.Time{})
			return srv.Read(p)
		}, os.ErrDeadlineExceeded},
	}
	for _, in := range interrupts {
		t.Run(in.name, func(t *testing.T) {
			cert := testCert(t, "canary")
			a, b := tcpPair(t)
			tap := &recordTap{Conn: a}
			tr := newTLSTransport(b)
			cli := tls.Client(tap, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
			srv := tls.Server(tr, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})
			errc := make(chan error, 1)
			go func() { errc <- srv.Handshake() }()
			if err := cli.Handshake(); err != nil {
				t.Fatalf("client handshake: %v", err)
			}
			if err := <-errc; err != nil {
				t.Fatalf("server handshake: %v", err)
			}
			buf := make([]byte, 4096)
			for i, split := range []int{1, 4, 5, 6, 300, -1} {
				msg := bytes.Repeat([]byte{byte('a' + i)}, 1000)
				rec := tap.record(t, cli, msg)
				if split < 0 {
					split = len(rec) - 1
				}
				if _, err := a.Write(rec[:split]); err != nil {
					t.Fatalf("write: %v", err)
				}
				waitQueued(t, b, split)
				if n, err := in.read(tr, srv, buf); n != 0 || !errors.Is(err, in.want) {
					t.Fatalf("split %d: read of a partial record = %d, %v; want 0, %v", split, n, err, in.want)
				}
				if q, held := socketQueued(t, b), tr.buffered(); q != 0 || held != 0 {
					t.Fatalf("split %d: %d bytes left in the socket, %d in the transport; want crypto/tls to hold them", split, q, held)
				}
				if _, err := a.Write(rec[split:]); err != nil {
					t.Fatalf("write: %v", err)
				}
				_ = srv.SetReadDeadline(time.Now().Add(waitTimeout))
				got := make([]byte, len(msg))
				if _, err := io.ReadFull(srv, got); err != nil || !bytes.Equal(got, msg) {
					t.Fatalf("split %d: record completed after a %v: read %q..., %v; want the message", split, in.want, got[:min(8, len(got))], err)
				}
				_ = srv.SetReadDeadline(time.Time{})
			}
		})
	}
}

// The runtime's TCP sockets are non-blocking: rawio's raw read(2) and
// write(2) (which bypass the runtime's system call bookkeeping) are safe
// only on descriptors that never sleep.
func TestCanaryRuntimeSocketsAreNonBlocking(t *testing.T) {
	a, b := tcpPair(t)
	for name, c := range map[string]net.Conn{"dialed": a, "accepted": b} {
		rc, err := c.(syscall.Conn).SyscallConn()
		if err != nil {
			t.Fatalf("%s: no raw conn: %v", name, err)
		}
		var flags int
		var ferr error
		if err := rc.Control(func(fd uintptr) { flags, ferr = unix.FcntlInt(fd, unix.F_GETFL, 0) }); err != nil || ferr != nil {
			t.Fatalf("%s: F_GETFL: %v %v", name, err, ferr)
		}
		if flags&unix.O_NONBLOCK == 0 {
			t.Fatalf("%s TCP socket is blocking (flags %s)", name, fmt.Sprintf("%#o", flags))
		}
	}
}
