package sidecar

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/meshlet/meshlet/internal/testutil"
)

// countingConn counts the writes and reads that reach the connection. It
// hides the socket (no SyscallConn), so a tlsTransport over it reads
// directly.
type countingConn struct {
	net.Conn
	writes, reads atomic.Int64
}

func (c *countingConn) Write(p []byte) (int, error) {
	c.writes.Add(1)
	return c.Conn.Write(p)
}

func (c *countingConn) Read(p []byte) (int, error) {
	c.reads.Add(1)
	return c.Conn.Read(p)
}

// transportPair is a TLS connection over loopback TCP with a tlsTransport
// under each end; the client's transport writes through a countingConn.
type transportPair struct {
	cli, srv       *tls.Conn
	cliT, srvT     *tlsTransport
	cliCount       *countingConn
	cliRaw, srvRaw net.Conn
}

func newTransportPair(t *testing.T) *transportPair {
	t.Helper()
	cert := testCert(t, "tlsio")
	a, b := tcpPair(t)
	p := &transportPair{cliCount: &countingConn{Conn: a}, cliRaw: a, srvRaw: b}
	p.cliT = newTLSTransport(p.cliCount)
	p.srvT = newTLSTransport(b)
	p.cli = tls.Client(p.cliT, &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13})
	p.srv = tls.Server(p.srvT, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13})
	errc := make(chan error, 1)
	go func() { errc <- p.srv.Handshake() }()
	if err := p.cli.Handshake(); err != nil {
		t.Fatalf("client handshake: %v", err)
	}
	if err := <-errc; err != nil {
		t.Fatalf("server handshake: %v", err)
	}
	if p.cliCount.writes.Load() == 0 {
		t.Fatalf("handshake wrote nothing through the transport")
	}
	return p
}

func randomBytes(t *testing.T, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatalf("failed to make random data: %v", err)
	}
	return b
}

// readAsync reads n bytes from c in a goroutine.
func readAsync(c net.Conn, n int) <-chan []byte {
	out := make(chan []byte, 1)
	go func() {
		b := make([]byte, n)
		if _, err := io.ReadFull(c, b); err != nil {
			out <- nil
			return
		}
		out <- b
	}()
	return out
}

func receive(t *testing.T, ch <-chan []byte) []byte {
	t.Helper()
	select {
	case b := <-ch:
		return b
	case <-time.After(waitTimeout):
		t.Fatalf("timed out reading")
		return nil
	}
}

// The records of one tls.Conn.Write inside a batch leave in one write (or
// one per maxWriteBatch); outside a batch each record is its own write.
func TestTLSTransportCoalescesRecords(t *testing.T) {
	cases := []struct {
		name      string
		size      int
		batch     bool
		minWrites int64
		maxWrites int64
	}{
		// The first 128 KiB go out in small records (dynamic record sizing).
		{"unbatched", 200 << 10, false, 12, 1 << 20},
		{"batched", 200 << 10, true, 1, 1},
		{"batched over the batch limit", 3 * maxWriteBatch / 2, true, 2, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newTransportPair(t)
			data := randomBytes(t, tc.size)
			got := readAsync(p.srv, len(data))
			before := p.cliCount.writes.Load()
			var n int
			var err error
			if tc.batch {
				n, err = writeBatched(p.cli, p.cliT, data)
			} else {
				n, err = p.cli.Write(data)
			}
			if err != nil || n != len(data) {
				t.Fatalf("write = %d, %v; want %d, nil", n, err, len(data))
			}
			writes := p.cliCount.writes.Load() - before
			if writes < tc.minWrites || writes > tc.maxWrites {
				t.Errorf("%d bytes took %d writes; want %d..%d", len(data), writes, tc.minWrites, tc.maxWrites)
			}
			if b := receive(t, got); !bytes.Equal(b, data) {
				t.Fatalf("peer received different data")
			}
		})
	}
}

// Outside a batch a write reaches the socket before Write returns (the
// peer reads it with no flush), and a batch ending empty writes nothing.
func TestTLSTransportPassesThroughOutsideBatch(t *testing.T) {
	p := newTransportPair(t)
	before := p.cliCount.writes.Load()
	if _, err := p.cli.Write([]byte("ping")); err != nil {
		t.Fatalf("write: %v", err)
	}
	if w := p.cliCount.writes.Load() - before; w != 1 {
		t.Fatalf("a small write outside a batch made %d writes; want 1", w)
	}
	if b := receive(t, readAsync(p.srv, 4)); string(b) != "ping" {
		t.Fatalf("peer read %q; want ping", b)
	}
	before = p.cliCount.writes.Load()
	p.cliT.beginBatch()
	if err := p.cliT.endBatch(); err != nil {
		t.Fatalf("empty batch: %v", err)
	}
	if w := p.cliCount.writes.Load() - before; w != 0 {
		t.Fatalf("an empty batch made %d writes; want 0", w)
	}
}

// Records written by another goroutine while a batch is open join it in
// order: the peer decrypts everything (a reordered record would fail its
// AEAD check) and gets every byte.
func TestTLSTransportConcurrentWritersKeepOrder(t *testing.T) {
	p := newTransportPair(t)
	const rounds, chunk = 50, 40 << 10
	got := readAsync(p.srv, 2*rounds*chunk)
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	wg.Add(2)
	go func() {
		defer wg.Done()
		buf := bytes.Repeat([]byte{'a'}, chunk)
		for i := 0; i < rounds; i++ {
			if _, err := writeBatched(p.cli, p.cliT, buf); err != nil {
				errs <- err
				return
			}
		}
	}()
	go func() {
		defer wg.Done()
		buf := bytes.Repeat([]byte{'b'}, chunk)
		for i := 0; i < rounds; i++ {
			if _, err := p.cli.Write(buf); err != nil {
				errs <- err
				return
			}
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("write: %v", err)
	}
	b := receive(t, got)
	if b == nil {
		t.Fatalf("peer failed to read the interleaved stream")
	}
	if a := bytes.Count(b, []byte{'a'}); a != rounds*chunk {
		t.Fatalf("peer got %d bytes of the batched writer; want %d", a, rounds*chunk)
	}
}

// Many records already received come in with one read(2), and the read
// buffer is given back as soon as it is drained.
func TestTLSTransportReadsManyRecordsPerFill(t *testing.T) {
	p := newTransportPair(t)
	if p.srvT.rc == nil {
		t.Fatalf("transport over a TCP conn has no raw conn")
	}
	// 48 KiB fit in loopback's socket buffers, and go out in 9 records
	// (dynamic record sizing starts small).
	data := randomBytes(t, 48<<10)
	before := p.srvT.fills.Load()
	writesBefore := p.cliCount.writes.Load()
	if _, err := p.cli.Write(data); err != nil {
		t.Fatalf("write: %v", err)
	}
	records := p.cliCount.writes.Load() - writesBefore
	b := receive(t, readAsync(p.srv, len(data)))
	if !bytes.Equal(b, data) {
		t.Fatalf("read different data")
	}
	if fills := p.srvT.fills.Load() - before; fills > 2 {
		t.Errorf("%d bytes written before reading took %d reads; want at most 2", len(data), fills)
	}
	if records < 8 {
		t.Errorf("test sent only %d records", records)
	}
	if n := p.srvT.buffered(); n != 0 || p.srvT.rbuf != nil {
		t.Fatalf("drained transport still holds a buffer (%d bytes)", n)
	}
}

// A transport holds its read buffer only while it has unread bytes: not
// while waiting for data, not once drained, not after Close.
func TestTLSTransportReleasesReadBuffer(t *testing.T) {
	a, b := tcpPair(t)
	tr := newTLSTransport(b)
	_ = tr.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := tr.Read(make([]byte, 10)); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("idle read: %v; want a deadline error", err)
	}
	if tr.rbuf != nil {
		t.Fatalf("a transport waiting for data holds a buffer")
	}
	_ = tr.SetReadDeadline(time.Time{})
	if _, err := a.Write([]byte("0123456789")); err != nil {
		t.Fatalf("write: %v", err)
	}
	// A read that fills p switches to buffered reads; the next one takes
	// all the socket has and keeps what p cannot hold.
	small := make([]byte, 4)
	if n, err := io.ReadFull(tr, small); err != nil || string(small[:n]) != "0123" {
		t.Fatalf("read %q, %v", small[:n], err)
	}
	if tr.rbuf != nil {
		t.Fatalf("a direct read left a buffer")
	}
	if n, err := io.ReadFull(tr, small[:2]); err != nil || string(small[:n]) != "45" {
		t.Fatalf("read %q, %v", small[:n], err)
	}
	if tr.buffered() != 4 || tr.rbuf == nil {
		t.Fatalf("partly read transport buffers %d bytes; want 4", tr.buffered())
	}
	held := tlsReadBuffersHeld.Load()
	if err := tr.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if tr.rbuf != nil || tr.buffered() != 0 || tlsReadBuffersHeld.Load() != held-1 {
		t.Fatalf("closed transport still holds its buffer")
	}
	if _, err := tr.Read(small); !errors.Is(err, net.ErrClosed) {
		t.Fatalf("read after close: %v; want net.ErrClosed", err)
	}
}

// A polling read returns errWouldBlock when nothing is ready, and the
// tls.Conn over it keeps working: later data and EOF arrive normally.
func TestTLSTransportPollRead(t *testing.T) {
	p := newTransportPair(t)
	buf := make([]byte, 64)
	if n, err := p.srvT.pollRead(p.srv, buf); n != 0 || err != errWouldBlock {
		t.Fatalf("poll of an idle conn = %d, %v; want 0, errWouldBlock", n, err)
	}
	if _, err := p.cli.Write([]byte("after")); err != nil {
		t.Fatalf("write: %v", err)
	}
	if b := receive(t, readAsync(p.srv, 5)); string(b) != "after" {
		t.Fatalf("read %q after a would-block; want after", b)
	}
	if err := p.cli.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	if _, err := p.srv.Read(buf); err != io.EOF {
		t.Fatalf("read after the peer closed: %v; want EOF", err)
	}
}

// copyBuffered relays plaintext into a TLS transport and TLS back out,
// byte for byte, with fewer TLS writes than records, and returns its
// buffers when done.
func TestCopyBufferedOverTLSTransport(t *testing.T) {
	p := newTransportPair(t)
	appIn, relaySrc := tcpPair(t)  // app -> relay (plaintext)
	relayDst, appOut := tcpPair(t) // relay -> app (plaintext)
	data := randomBytes(t, 2<<20)
	heldBefore := relayBuffersHeld.Load()
	type result struct {
		n   int64
		err error
	}
	in, out := make(chan result, 1), make(chan result, 1)
	go func() { // plaintext -> TLS client side
		n, err := copyBuffered(p.cli, struct{ net.Conn }{relaySrc}, nil)
		_ = p.cli.CloseWrite()
		in <- result{n, err}
	}()
	go func() { // TLS server side -> plaintext
		n, err := copyBuffered(struct{ net.Conn }{relayDst}, p.srv, nil)
		_ = relayDst.(*net.TCPConn).CloseWrite()
		out <- result{n, err}
	}()
	got := make(chan []byte, 1)
	go func() {
		b, err := io.ReadAll(appOut)
		if err != nil {
			b = nil
		}
		got <- b
	}()
	if _, err := appIn.Write(data); err != nil {
		t.Fatalf("write: %v", err)
	}
	_ = appIn.(*net.TCPConn).CloseWrite()
	if b := receive(t, got); !bytes.Equal(b, data) {
		t.Fatalf("relayed data differs (%d bytes, want %d)", len(b), len(data))
	}
	for _, ch := range []chan result{in, out} {
		select {
		case r := <-ch:
			if r.err != nil || r.n != int64(len(data)) {
				t.Fatalf("copyBuffered = %d, %v; want %d, nil", r.n, r.err, len(data))
			}
		case <-time.After(waitTimeout):
			t.Fatalf("relay did not finish")
		}
	}
	if w := p.cliCount.writes.Load(); w >= int64(len(data)>>14) {
		t.Errorf("relaying %d bytes took %d TLS writes; want fewer than one per record", len(data), w)
	}
	if relayBuffersHeld.Load() != heldBefore || p.srvT.rbuf != nil {
		t.Fatalf("finished relays still hold buffers")
	}
}

// connAlive sees through a tlsTransport to the socket: an idle connection
// is alive, one whose peer closed is not.
func TestConnAliveOverTLSTransport(t *testing.T) {
	p := newTransportPair(t)
	if !connAlive(&closeNotifyConn{Conn: p.srv, onClose: func() {}}) {
		t.Fatalf("idle connection reported closed")
	}
	if err := p.cliRaw.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	testutil.WaitFor(t, waitTimeout, "connAlive to see the peer's close", func() bool {
		return !connAlive(p.srv)
	})
}

// A relay reading a TLS transport gives its copy buffer back once idle
// (the idle deadline passes through the transport and does not break the
// TLS connection) and relays the next burst; the transport holds no read
// buffer while idle.
func TestRelayOverTLSTransportReleasesBuffersWhenIdle(t *testing.T) {
	old := relayIdle
	relayIdle = 50 * time.Millisecond
	t.Cleanup(func() { relayIdle = old })
	p := newTransportPair(t)
	dst, reader := tcpPair(t)
	done := make(chan error, 1)
	go func() {
		_, err := copyBuffered(struct{ net.Conn }{dst}, p.srv, nil)
		dst.Close()
		done <- err
	}()
	for round := 0; round < 2; round++ {
		chunk := randomBytes(t, 300<<10)
		if _, err := p.cli.Write(chunk); err != nil {
			t.Fatalf("round %d: write: %v", round, err)
		}
		got := make([]byte, len(chunk))
		if _, err := io.ReadFull(reader, got); err != nil || !bytes.Equal(got, chunk) {
			t.Fatalf("round %d: relayed data differs (err %v)", round, err)
		}
		testutil.WaitFor(t, waitTimeout, "the idle relay to return its buffer", func() bool {
			return relayBuffersHeld.Load() == 0
		})
		if p.srvT.buffered() != 0 {
			t.Fatalf("round %d: idle transport holds %d bytes", round, p.srvT.buffered())
		}
	}
	if err := p.cli.Close(); err != nil {
		t.Fatalf("close: %v", err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("relay: %v", err)
		}
	case <-time.After(waitTimeout):
		t.Fatalf("relay did not end after the peer closed")
	}
}
