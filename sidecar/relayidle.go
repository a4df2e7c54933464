package sidecar

import (
	"errors"
	"io"
	"net"
	"os"
	"sync/atomic"
	"time"
)

// defaultTCPIdleTimeout is Envoy's tcp_proxy idle_timeout when unset.
const defaultTCPIdleTimeout = time.Hour

// errRelayIdle ends a TCP relay that moved no byte either way for its
// idle timeout.
var errRelayIdle = errors.New("tcp_proxy idle timeout")

// idleClock is a TCP relay's idle timeout (tcp_proxy.idle_timeout): when
// either direction last moved bytes. A direction blocked on a read wakes
// every timeout/2 (a read deadline) to look at it, so a relay nobody
// uses is closed between timeout and 1.5×timeout after its last byte,
// whichever direction carried it. Nil or a zero timeout: no limit.
type idleClock struct {
	timeout time.Duration
	last    atomic.Int64 // unix nanoseconds
	fired   atomic.Bool
}

func newIdleClock(timeout time.Duration) *idleClock {
	if timeout <= 0 {
		return nil
	}
	c := &idleClock{timeout: timeout}
	c.touch()
	return c
}

func (c *idleClock) touch() {
	if c != nil {
		c.last.Store(time.Now().UnixNano())
	}
}

// deadline is when a blocked read should next look at the clock (zero:
// never).
func (c *idleClock) deadline() time.Time {
	if c == nil {
		return time.Time{}
	}
	return time.Now().Add(c.timeout / 2)
}

// pooledWait is how long a read holding a pooled buffer waits before the
// buffer goes back: relayIdle, or half the idle timeout if shorter.
func (c *idleClock) pooledWait() time.Duration {
	if c != nil && c.timeout/2 < relayIdle {
		return c.timeout / 2
	}
	return relayIdle
}

// expired reports whether the relay has been idle for the timeout, and
// records that it fired.
func (c *idleClock) expired() bool {
	if c == nil || time.Since(time.Unix(0, c.last.Load())) < c.timeout {
		return false
	}
	c.fired.Store(true)
	return true
}

// deadlinePassedErr reports whether err is a read deadline passing.
func deadlinePassedErr(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// spliceIdle copies src to dst with the kernel's splice path, waking every
// half idle timeout to look at the clock.
func spliceIdle(dst, src *net.TCPConn, clock *idleClock) (int64, error) {
	var written int64
	for {
		_ = src.SetReadDeadline(clock.deadline())
		n, err := dst.ReadFrom(src)
		written += n
		if n > 0 {
			clock.touch()
		}
		switch {
		case err == nil:
			return written, nil
		case !deadlinePassedErr(err):
			return written, err
		case clock.expired():
			return written, errRelayIdle
		}
	}
}

// idleReader is src for io.Copy (Config.PlainIO), with the idle clock.
type idleReader struct {
	src   net.Conn
	clock *idleClock
}

func (r idleReader) Read(p []byte) (int, error) {
	for {
		_ = r.src.SetReadDeadline(r.clock.deadline())
		n, err := r.src.Read(p)
		if n > 0 {
			r.clock.touch()
		}
		switch {
		case n > 0 || err == nil || !deadlinePassedErr(err):
			return n, err
		case r.clock.expired():
			return 0, errRelayIdle
		}
	}
}

var _ io.Reader = idleReader{}
