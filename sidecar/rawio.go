package sidecar

import (
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Raw socket I/O on the data path.
//
// The proxy's sockets are non-blocking: a read(2) or write(2) on them never
// sleeps, it returns EAGAIN and the goroutine waits in the netpoller. Made
// as ordinary system calls, they still mark the thread's P as "in a
// syscall", and a write on loopback or a veth runs the receiving socket's
// TCP stack inline, which often takes longer than the runtime's 20 µs
// sysmon tick. With one P (the sidecar's GOMAXPROCS is 1, as Envoy runs
// with --concurrency 1) sysmon then retakes the P and hands it to another
// thread, and the goroutine continues there when the call returns: two
// futex wake-ups and a thread switch per hop, which cost more CPU than the
// proxy's own work at a moderate request rate. Raw system calls leave the
// P where it is. They are safe here only because the descriptors are
// non-blocking; a blocking descriptor must never be read or written this
// way.

// rawRead is read(2) as a raw system call, retried when interrupted.
func rawRead(fd int, p []byte) (int, error) { return rawRW(unix.SYS_READ, fd, p) }

// rawWrite is write(2) as a raw system call, retried when interrupted.
func rawWrite(fd int, p []byte) (int, error) { return rawRW(unix.SYS_WRITE, fd, p) }

func rawRW(trap uintptr, fd int, p []byte) (int, error) {
	for {
		n, _, errno := syscall.RawSyscall(trap, uintptr(fd), uintptr(unsafe.Pointer(unsafe.SliceData(p))), uintptr(len(p)))
		if errno == syscall.EINTR {
			continue
		}
		if errno != 0 {
			return 0, errno
		}
		return int(n), nil
	}
}

// rawTCP is a TCP connection whose Read and Write go through rawRead and
// rawWrite, waiting in the netpoller (deadlines included) when the socket
// is not ready. Everything else is the *net.TCPConn's.
//
// The functions handed to the RawConn are made once per connection and
// work on the fields below, so a Read or Write allocates nothing; rmu and
// wmu serialize Reads and Writes (one reader and one writer at a time, as
// the proxy uses a connection).
type rawTCP struct {
	*net.TCPConn
	rc syscall.RawConn

	rmu    sync.Mutex
	rp     []byte
	rn     int
	rerrno error
	readFn func(fd uintptr) bool

	wmu     sync.Mutex
	wp      []byte
	wn      int
	werrno  error
	writeFn func(fd uintptr) bool
}

// dataConn is c as the data path uses it: with raw I/O (withRawIO), or as
// it is when plain (Config.PlainIO).
func dataConn(c net.Conn, plain bool) net.Conn {
	if plain {
		return c
	}
	return withRawIO(c)
}

// rawConnsMade counts the connections given raw I/O (for tests).
var rawConnsMade atomic.Int64

// withRawIO returns c with raw reads and writes if it is a TCP connection
// that exposes its socket, else c itself.
func withRawIO(c net.Conn) net.Conn {
	tc, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := tc.SyscallConn()
	if err != nil {
		return c
	}
	rawConnsMade.Add(1)
	r := &rawTCP{TCPConn: tc, rc: rc}
	r.readFn, r.writeFn = r.readOnce, r.writeAll
	return r
}

// tcpConnOf returns the *net.TCPConn of c (plain or with raw I/O).
func tcpConnOf(c net.Conn) (*net.TCPConn, bool) {
	switch t := c.(type) {
	case *net.TCPConn:
		return t, true
	case *rawTCP:
		return t.TCPConn, true
	}
	return nil, false
}

// Read implements net.Conn.
func (c *rawTCP) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	c.rp, c.rn, c.rerrno = p, 0, nil
	err := c.rc.Read(c.readFn)
	n, errno := c.rn, c.rerrno
	c.rp = nil
	switch {
	case err != nil:
		return 0, err
	case errno != nil:
		return 0, c.opError("read", errno)
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// readOnce is Read's RawConn function: false (wait) on EAGAIN.
func (c *rawTCP) readOnce(fd uintptr) bool {
	c.rn, c.rerrno = rawRead(int(fd), c.rp)
	return c.rerrno != syscall.EAGAIN
}

// Write implements net.Conn: it returns once all of p is written, or on
// the first error.
func (c *rawTCP) Write(p []byte) (int, error) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	c.wp, c.wn, c.werrno = p, 0, nil
	err := c.rc.Write(c.writeFn)
	n, errno := c.wn, c.werrno
	c.wp = nil
	switch {
	case err != nil:
		return n, err
	case errno != nil:
		return n, c.opError("write", errno)
	}
	return n, nil
}

// writeAll is Write's RawConn function: it writes until all is written or
// an error, and returns false (wait) on EAGAIN, to go on where it stopped.
func (c *rawTCP) writeAll(fd uintptr) bool {
	for c.wn < len(c.wp) {
		m, err := rawWrite(int(fd), c.wp[c.wn:])
		if err == syscall.EAGAIN {
			return false
		}
		if err != nil {
			c.werrno = err
			return true
		}
		c.wn += m
	}
	return true
}

func (c *rawTCP) opError(op string, errno error) error {
	return &net.OpError{Op: op, Net: "tcp", Source: c.LocalAddr(), Addr: c.RemoteAddr(), Err: os.NewSyscallError(op, errno)}
}
