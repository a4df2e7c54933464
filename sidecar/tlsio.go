package sidecar

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// TLS transport buffers. crypto/tls writes every record (at most 16 KiB of
// plaintext) with its own write(2) and reads about one record per read(2);
// tlsTransport, placed under a tls.Conn, gathers the records of one relay
// write into one write(2) and pulls many records per read(2).
const (
	// tlsReadBufferSize is the most one read(2) under a tls.Conn takes in.
	tlsReadBufferSize = 256 << 10
	// maxWriteBatch bounds the records gathered before they are written.
	maxWriteBatch = 512 << 10
	// writeBatchSize is a pooled batch buffer's initial capacity: a full
	// copy buffer of plaintext plus the per-record overhead.
	writeBatchSize = tlsCopyBufferSize + tlsCopyBufferSize/256
)

var (
	tlsReadBuffers = sync.Pool{New: func() any { b := make([]byte, tlsReadBufferSize); return &b }}
	writeBatches   = sync.Pool{New: func() any { b := make([]byte, 0, writeBatchSize); return &b }}
)

// tlsReadBuffersHeld counts pooled read buffers held by tlsTransports (for
// tests): a transport holds one only while it has bytes not yet read.
var tlsReadBuffersHeld atomic.Int64

// tlsTransportsMade counts the tlsTransports made (for tests).
var tlsTransportsMade atomic.Int64

// errWouldBlock is returned by a polling read (see tlsTransport.pollRead)
// when no byte can be read without waiting. It is a temporary net.Error,
// so crypto/tls keeps a partly read record and the connection stays usable.
var errWouldBlock net.Error = wouldBlockError{}

type wouldBlockError struct{}

func (wouldBlockError) Error() string   { return "no data ready without blocking" }
func (wouldBlockError) Timeout() bool   { return true }
func (wouldBlockError) Temporary() bool { return true }

// tlsTransport is the connection under a tls.Conn.
//
// Writes pass straight through, except between beginBatch and endBatch,
// when they are gathered and sent with one write at endBatch. Writes are
// serialized by wmu (crypto/tls already serializes them under its own
// output lock, which it always takes before ours), so a record written by
// another goroutine during a batch (a KeyUpdate reply, an alert) joins the
// batch in order instead of overtaking it.
//
// Reads, while data streams in (a read(2) fills what crypto/tls asked
// for), go through a large pooled buffer, filled by one non-blocking
// read(2) when the socket is readable: the buffer is taken only once data
// is there and given back as soon as it is drained, so a connection
// waiting for data holds none. Small reads go straight to crypto/tls.
// Reads are serialized by crypto/tls (under its input lock); rmu only
// guards the buffer against Close. Conns that do not expose a raw file
// descriptor are read directly.
type tlsTransport struct {
	net.Conn
	rc syscall.RawConn // nil: reads pass through

	rmu        sync.Mutex
	rbuf       *[]byte // pooled; non-nil only while it holds unread bytes
	rpos, rend int
	closed     bool
	poll       atomic.Bool // reads return errWouldBlock instead of waiting
	bulk       bool        // read through rbuf (reader only)
	fills      atomic.Int64

	// fill's state (reader only): see fill.
	fillP   []byte
	fillN   int
	fillErr error
	fillFn  func(fd uintptr) bool

	wmu   sync.Mutex
	batch *[]byte // non-nil during a batch
}

// newTLSTransport wraps c to be passed to tls.Client or tls.Server. A TCP
// connection's reads and writes become raw system calls (rawio.go).
func newTLSTransport(c net.Conn) *tlsTransport {
	c = withRawIO(c)
	tlsTransportsMade.Add(1)
	t := &tlsTransport{Conn: c}
	t.fillFn = t.fillOnce
	if r, ok := c.(*rawTCP); ok {
		t.rc = r.rc
	} else if sc, ok := c.(syscall.Conn); ok {
		if rc, err := sc.SyscallConn(); err == nil {
			t.rc = rc
		}
	}
	return t
}

// tlsUnder is the connection to put under a tls.Conn over c: a
// tlsTransport, or c itself when plain (Config.PlainIO).
func tlsUnder(c net.Conn, plain bool) net.Conn {
	if plain {
		return c
	}
	return newTLSTransport(c)
}

// transportOf returns the tlsTransport under c, if c is a tls.Conn over one.
func transportOf(c net.Conn) *tlsTransport {
	tc, ok := c.(*tls.Conn)
	if !ok {
		return nil
	}
	t, _ := tc.NetConn().(*tlsTransport)
	return t
}

// SyscallConn exposes the socket, so connAlive can peek at it. Bytes this
// transport already buffered are not visible there; a peer's EOF is.
func (t *tlsTransport) SyscallConn() (syscall.RawConn, error) {
	if t.rc == nil {
		return nil, fmt.Errorf("failed to get raw connection: %w", errors.ErrUnsupported)
	}
	return t.rc, nil
}

// Close closes the socket at once (without waiting for a write in
// progress) and drops any buffered input.
func (t *tlsTransport) Close() error {
	err := t.Conn.Close()
	t.rmu.Lock()
	t.closed = true
	t.releaseReadLocked()
	t.rmu.Unlock()
	return err
}

// Read returns buffered bytes, or fills the buffer with what the socket has.
func (t *tlsTransport) Read(p []byte) (int, error) {
	if t.rc == nil {
		return t.Conn.Read(p)
	}
	if len(p) == 0 {
		return 0, nil
	}
	t.rmu.Lock()
	if t.rbuf != nil {
		n := copy(p, (*t.rbuf)[t.rpos:t.rend])
		t.rpos += n
		if t.rpos == t.rend {
			t.releaseReadLocked()
		}
		t.rmu.Unlock()
		return n, nil
	}
	t.rmu.Unlock()
	return t.fill(p)
}

// buffered is the number of bytes read from the socket and not yet read
// from the transport.
func (t *tlsTransport) buffered() int {
	t.rmu.Lock()
	defer t.rmu.Unlock()
	return t.rend - t.rpos
}

// fill waits until the socket is readable (unless polling), then reads.
// While the reads keep filling the caller's p (bulk), it reads as much as
// the socket has into a pooled buffer and returns the first part in p;
// otherwise (small messages, handshakes) it reads straight into p. Reads
// are serialized by crypto/tls, so the fill state lives in the transport
// and the RawConn function (fillFn, made once) allocates nothing.
func (t *tlsTransport) fill(p []byte) (int, error) {
	t.fillP, t.fillN, t.fillErr = p, 0, nil
	err := t.rc.Read(t.fillFn)
	n, rerr := t.fillN, t.fillErr
	t.fillP = nil
	if err != nil {
		return 0, err
	}
	return n, rerr
}

// fillOnce is fill's RawConn function: false (wait) when the socket has
// nothing yet and the read is not polling.
func (t *tlsTransport) fillOnce(fd uintptr) bool {
	p := t.fillP
	var bp *[]byte
	dst := p
	if t.bulk {
		bp = tlsReadBuffers.Get().(*[]byte)
		dst = *bp
	}
	m, err := rawRead(int(fd), dst)
	if err != nil || m == 0 {
		if bp != nil {
			tlsReadBuffers.Put(bp)
		}
		if err == unix.EAGAIN && !t.poll.Load() {
			return false // wait for the socket without holding a buffer
		}
		t.fillErr = t.readError(err)
		return true
	}
	t.fills.Add(1)
	if bp == nil {
		t.fillN = m
		t.bulk = m == len(p)
		return true
	}
	t.bulk = m > len(p)
	t.fillN = copy(p, dst[:m])
	t.keep(bp, t.fillN, m)
	return true
}

// readError is what Read returns for a read(2) that failed with errno, or
// found EOF (errno nil).
func (t *tlsTransport) readError(errno error) error {
	switch {
	case errno == nil:
		return io.EOF
	case errno == unix.EAGAIN:
		return errWouldBlock
	}
	return &net.OpError{Op: "read", Net: t.LocalAddr().Network(), Source: t.LocalAddr(), Addr: t.RemoteAddr(), Err: os.NewSyscallError("read", errno)}
}

// keep holds bp as the read buffer when bytes pos..end are left unread.
func (t *tlsTransport) keep(bp *[]byte, pos, end int) {
	t.rmu.Lock()
	defer t.rmu.Unlock()
	if pos == end || t.closed {
		tlsReadBuffers.Put(bp)
		return
	}
	t.rbuf, t.rpos, t.rend = bp, pos, end
	tlsReadBuffersHeld.Add(1)
}

func (t *tlsTransport) releaseReadLocked() {
	if t.rbuf == nil {
		return
	}
	tlsReadBuffers.Put(t.rbuf)
	t.rbuf, t.rpos, t.rend = nil, 0, 0
	tlsReadBuffersHeld.Add(-1)
}

// pollRead reads from tc (a tls.Conn over t) without waiting for the
// socket: it returns errWouldBlock when nothing complete is at hand. Only
// the goroutine that reads tc may call it.
func (t *tlsTransport) pollRead(tc net.Conn, p []byte) (int, error) {
	t.poll.Store(true)
	defer t.poll.Store(false)
	return tc.Read(p)
}

// beginBatch starts gathering writes; endBatch sends them. One relay
// goroutine writes a conn's data, so batches do not overlap; if they did,
// they would merge (the first endBatch sends both) and order would hold.
func (t *tlsTransport) beginBatch() {
	t.wmu.Lock()
	if t.batch == nil {
		t.batch = writeBatches.Get().(*[]byte)
	}
	t.wmu.Unlock()
}

// endBatch writes the gathered records with one write and ends the batch.
func (t *tlsTransport) endBatch() error {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	bp := t.batch
	if bp == nil {
		return nil
	}
	t.batch = nil
	var err error
	if len(*bp) > 0 {
		_, err = t.Conn.Write(*bp)
	}
	if cap(*bp) <= 2*maxWriteBatch {
		*bp = (*bp)[:0]
		writeBatches.Put(bp)
	}
	return err
}

// Write sends p, or appends it to the open batch (sending the batch first
// if p would make it larger than maxWriteBatch).
func (t *tlsTransport) Write(p []byte) (int, error) {
	t.wmu.Lock()
	defer t.wmu.Unlock()
	if t.batch == nil {
		return t.Conn.Write(p)
	}
	b := *t.batch
	if len(b) > 0 && len(b)+len(p) > maxWriteBatch {
		_, err := t.Conn.Write(b)
		b = b[:0]
		*t.batch = b
		if err != nil {
			return 0, err
		}
	}
	*t.batch = append(b, p...)
	return len(p), nil
}
