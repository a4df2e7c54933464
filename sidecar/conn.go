package sidecar

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Relay buffers. Relays are copied through large pooled buffers so every
// read and write moves many TLS records (fewer system calls; with a
// tlsTransport under the TLS side, one write(2) per buffer); a direction
// that sees no data for relayIdle gives its buffer back and waits with a
// small one, so idle connections do not pin 64-256 KiB each.
const (
	copyBufferSize    = 64 << 10
	tlsCopyBufferSize = 256 << 10
	idleBufferSize    = 2 << 10
	// tlsMaxPlaintext is the most plaintext one TLS record carries.
	tlsMaxPlaintext = 16 << 10
	// oneRecord is a write small enough to be one record even while
	// crypto/tls starts a connection with small records.
	oneRecord = 1 << 10
)

var (
	copyBuffers    = sync.Pool{New: func() any { b := make([]byte, copyBufferSize); return &b }}
	tlsCopyBuffers = sync.Pool{New: func() any { b := make([]byte, tlsCopyBufferSize); return &b }}
)

// relayIdle is how long a relay direction waits for data while holding a
// pooled buffer. A variable so tests can shorten it.
var relayIdle = time.Second

// relayBuffersHeld counts pooled buffers held by relays (for tests).
var relayBuffersHeld atomic.Int64

// tcpStats are the tcp_proxy filter's counters, tcp.<stat_prefix>.*.
type tcpStats struct {
	cxTotal, noCluster, connectFail, idleTimeout *atomic.Uint64
}

func newTCPStats(r *statsRegistry, prefix string) *tcpStats {
	p := "tcp." + prefix + "."
	return &tcpStats{
		cxTotal:     r.counter(p + "downstream_cx_total"),
		noCluster:   r.counter(p + "downstream_cx_no_route"),
		connectFail: r.counter(p + "upstream_connect_fail"),
		idleTimeout: r.counter(p + "idle_timeout"),
	}
}

// handle runs one downstream connection through the listener's filter
// chain: TLS handshake, ext_authz, then tcp_proxy or the HTTP connection
// manager. Nothing is read from the client before authorization passes.
func (l *listener) handle(c net.Conn) {
	handedOff := false
	l.stats.cxTotal.Add(1)
	l.stats.cxActive.Add(1)
	st := l.joinState(c)
	finish := func() {
		c.Close()
		if st != nil {
			st.conns.remove(c)
		}
		l.stats.cxActive.Add(-1)
		l.stats.cxDestroy.Add(1)
		l.p.releaseConn()
	}
	defer func() {
		if !handedOff {
			finish()
		}
	}()
	if st == nil {
		return
	}
	if st.cfg.passthrough {
		l.passthrough(c, st)
		return
	}
	var down net.Conn
	cs := st // the state of the chosen filter chain
	if st.tlsConf == nil {
		down = dataConn(c, l.p.cfg.PlainIO)
	} else {
		tc := tls.Server(tlsUnder(c, l.p.cfg.PlainIO), st.tlsConf)
		ctx, cancel := context.WithTimeout(l.ctx, handshakeTimeout)
		err := tc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			l.stats.sslError.Add(1)
			l.log.Debug("downstream TLS handshake failed", "remote", c.RemoteAddr().String(), "error", err)
			return
		}
		l.stats.sslHandshake.Add(1)
		if tc.ConnectionState().DidResume {
			l.stats.sslSessionReused.Add(1)
		}
		down = tc
		if st.byServerName != nil {
			if cs = st.byServerName[strings.ToLower(tc.ConnectionState().ServerName)]; cs == nil {
				l.stats.noFilterChain.Add(1)
				return
			}
		}
	}
	chain := cs.cfg.chain
	// A TCP relay ends when its client connection is closed by a drain or
	// a re-authorization: its context closes the upstream side too.
	relayCtx, endRelay := l.ctx, context.CancelFunc(nil)
	if chain.tcp != nil {
		relayCtx, endRelay = l.relayContext(st, c)
		defer endRelay()
	}
	untrack := func() {}
	if chain.authz != nil {
		ourURI := ""
		if chain.tls != nil {
			ourURI = l.p.secrets.leafURI(chain.tls.cert)
		}
		if !l.p.authz.authorize(l.ctx, chain.authz, cs.authzStats, down, ourURI) {
			return
		}
		untrack = l.p.authz.track(down, ourURI, chain.authz, cs.authzStats, endRelay)
	}
	if chain.tcp != nil {
		l.p.proxyTCP(relayCtx, chain.tcp, cs.tcpStats, down)
		untrack()
		return
	}
	handedOff = l.serveHTTP(&httpConn{Conn: down, state: cs, onClose: func() { untrack(); finish() }})
	if !handedOff {
		untrack()
	}
}

// relayContext is the context of a TCP relay for c, accepted under st:
// cancelled when the listener ends, when st's drain closes c, or by the
// returned func.
func (l *listener) relayContext(st *listenerState, c net.Conn) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(l.ctx)
	if !st.conns.onClose(c, cancel) {
		cancel() // drained already
	}
	return ctx, cancel
}

// joinState registers c with the listener's current state, retrying if the
// state is being replaced; nil means the listener is shutting down.
func (l *listener) joinState(c net.Conn) *listenerState {
	for {
		st := l.state.Load()
		if st.conns.add(c) {
			return st
		}
		if l.state.Load() == st {
			return nil // drained and not replaced: the listener is closing
		}
	}
}

// proxyTCP connects down to an endpoint of the tcp_proxy's cluster and
// copies bytes both ways until both sides are done.
func (p *Proxy) proxyTCP(ctx context.Context, t *tcpProxyConfig, st *tcpStats, down net.Conn) {
	st.cxTotal.Add(1)
	name := pickWeighted(t.clusters)
	c := p.clusters.get(name)
	if c == nil {
		st.noCluster.Add(1)
		p.log.Debug("tcp_proxy: cluster not found", "cluster", name)
		return
	}
	up, _, done, err := c.dial(ctx)
	if err != nil {
		st.connectFail.Add(1)
		p.log.Debug("tcp_proxy: failed to connect upstream", "cluster", name, "error", err)
		return
	}
	defer done()
	stop := context.AfterFunc(ctx, func() { up.Close(); down.Close() })
	defer stop()
	clock := newIdleClock(t.idleTimeout)
	tx, rx := pipe(down, up, p.cfg.PlainIO, clock)
	if clock != nil && clock.fired.Load() {
		st.idleTimeout.Add(1)
	}
	c.stats.txBytes.Add(uint64(tx))
	c.stats.rxBytes.Add(uint64(rx))
	up.Close()
}

// pipe copies a->b and b->a concurrently (one extra goroutine), propagating
// half-closes, and returns the byte counts. It closes neither side on a
// clean finish; an error in one direction closes both so the other stops.
// plain copies with io.Copy (Config.PlainIO). clock (nil: none) ends
// both directions once neither moved a byte for its timeout.
func pipe(a, b net.Conn, plain bool, clock *idleClock) (aToB, bToA int64) {
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		aToB = copyHalf(b, a, plain, clock)
	}()
	bToA = copyHalf(a, b, plain, clock)
	wg.Wait()
	return aToB, bToA
}

func copyHalf(dst, src net.Conn, plain bool, clock *idleClock) int64 {
	var n int64
	var err error
	switch {
	case plain && clock != nil:
		n, err = io.Copy(dst, idleReader{src: src, clock: clock})
	case plain:
		n, err = io.Copy(dst, src)
	default:
		n, err = copyConn(dst, src, clock)
	}
	if err != nil {
		dst.Close()
		src.Close()
		return n
	}
	if cw, ok := dst.(interface{ CloseWrite() error }); ok {
		if cw.CloseWrite() == nil {
			return n
		}
	}
	dst.Close()
	return n
}

// copyConn copies with the kernel's splice path when both ends are plain
// TCP, and through copyBuffered otherwise.
func copyConn(dst, src net.Conn, clock *idleClock) (int64, error) {
	if d, ok := tcpConnOf(dst); ok {
		if s, ok := tcpConnOf(src); ok {
			if clock != nil {
				return spliceIdle(d, s, clock)
			}
			return d.ReadFrom(s)
		}
	}
	return copyBuffered(dst, src, clock)
}

// copyBuffered copies src to dst until EOF. While data flows it reads into
// a pooled buffer (tlsCopyBufferSize when either side is TLS, else
// copyBufferSize), with a read deadline relayIdle ahead (half the idle
// timeout if shorter; re-armed at most every half of that); when the
// deadline passes it returns the buffer and
// blocks on a small one, taking a pooled one again with the next data. A
// read deadline is recoverable for both TCP and TLS connections
// (crypto/tls keeps a partly read record).
//
// Over a tlsTransport, a TLS source is drained of every record already
// received before the plaintext is written (crypto/tls returns one record
// per Read), and a TLS destination gets each write's records in one
// write(2).
//
// With a clock, every read counts as activity, and the small buffer's
// read wakes every half idle timeout to look at it (errRelayIdle).
func copyBuffered(dst, src net.Conn, clock *idleClock) (written int64, err error) {
	wt, rt := transportOf(dst), transportOf(src)
	rb := relayBuffer{pool: &copyBuffers}
	if wt != nil || rt != nil {
		rb.pool = &tlsCopyBuffers
	}
	defer rb.release()
	if clock != nil {
		// The small buffer's first read looks at the clock too: a relay
		// that never moves a byte idles out as well.
		_ = src.SetReadDeadline(clock.deadline())
	}
	var armed time.Time
	for {
		buf := rb.get()
		if rb.pooled() {
			if now := time.Now(); now.Sub(armed) > clock.pooledWait()/2 {
				_ = src.SetReadDeadline(now.Add(clock.pooledWait()))
				armed = now
			}
		}
		n, rerr := src.Read(buf)
		if rerr == nil && n > 0 && rt != nil && rb.pooled() {
			n, rerr = drainTLS(rt, src, buf, n)
		}
		if n > 0 {
			clock.touch()
			nw, werr := writeBatched(dst, wt, buf[:n])
			written += int64(nw)
			if werr != nil {
				return written, werr
			}
			if nw != n {
				return written, io.ErrShortWrite
			}
		}
		switch {
		case rerr == nil && !rb.pooled():
			rb.take()
			armed = time.Time{}
		case rerr == nil:
		case errors.Is(rerr, os.ErrDeadlineExceeded) && (rb.pooled() || clock != nil):
			rb.release() // no-op when already small
			if clock.expired() {
				return written, errRelayIdle
			}
			_ = src.SetReadDeadline(clock.deadline())
		case rerr == io.EOF:
			return written, nil
		default:
			return written, rerr
		}
	}
}

// relayBuffer is one relay direction's copy buffer: pooled while data
// flows, small while idle.
type relayBuffer struct {
	pool  *sync.Pool
	bp    *[]byte
	small []byte
}

func (r *relayBuffer) pooled() bool { return r.bp != nil }

func (r *relayBuffer) get() []byte {
	if r.bp != nil {
		return *r.bp
	}
	if r.small == nil {
		r.small = make([]byte, idleBufferSize)
	}
	return r.small
}

func (r *relayBuffer) take() {
	r.bp = r.pool.Get().(*[]byte)
	relayBuffersHeld.Add(1)
}

func (r *relayBuffer) release() {
	if r.bp == nil {
		return
	}
	r.pool.Put(r.bp)
	r.bp = nil
	relayBuffersHeld.Add(-1)
}

// drainTLS appends to buf[:n] the plaintext of the records src (a tls.Conn
// over t) can return without waiting for the socket, while a full record
// still fits. errWouldBlock just ends the batch.
func drainTLS(t *tlsTransport, src net.Conn, buf []byte, n int) (int, error) {
	for len(buf)-n >= tlsMaxPlaintext && t.buffered() > 0 {
		m, err := t.pollRead(src, buf[n:])
		n += m
		if err == errWouldBlock {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

// writeBatched writes b to dst; over a tlsTransport, all of the records it
// makes go out in one write.
func writeBatched(dst net.Conn, t *tlsTransport, b []byte) (int, error) {
	if t == nil || len(b) <= oneRecord {
		return dst.Write(b)
	}
	t.beginBatch()
	n, err := dst.Write(b)
	if ferr := t.endBatch(); err == nil && ferr != nil {
		return 0, ferr
	}
	return n, err
}

// pickWeighted chooses a cluster by weight (the only one, usually).
func pickWeighted(cs []weightedCluster) string { return cs[pickIndex(cs)].name }

// pickIndex chooses the index of a cluster by weight.
func pickIndex(cs []weightedCluster) int {
	if len(cs) == 1 {
		return 0
	}
	var total uint64
	for _, c := range cs {
		total += uint64(c.weight)
	}
	n := rand.Uint64N(total)
	for i, c := range cs {
		if n < uint64(c.weight) {
			return i
		}
		n -= uint64(c.weight)
	}
	return len(cs) - 1
}
