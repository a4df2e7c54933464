package sidecar

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Upstream HTTP/1.1 connection pool limits (those http.Transport had).
const (
	upstreamMaxIdlePerHost = 64
	upstreamIdleTimeout    = 90 * time.Second
	upstreamBufferSize     = 4 << 10
	// upstreamMaxHeaderBytes bounds what the response heads of one
	// exchange (1xx ones included) may take, as h1MaxHeaderBytes bounds a
	// request's.
	upstreamMaxHeaderBytes = h1MaxHeaderBytes
	// upstreamWriteWait is how long a finished response waits for its
	// request body's writer before the connection is given up as still
	// busy: the writer may not have reported yet although the upstream
	// read everything (net/http's maxWriteWaitBeforeConnReuse).
	upstreamWriteWait = 50 * time.Millisecond
)

// h1Transport is the HTTP connection manager's client side: HTTP/1.1 over
// pooled keep-alive connections to exactly the endpoint a request names
// (URL.Host). Unlike http.Transport it runs each exchange on the calling
// goroutine (no per-connection read and write loops to hand off to), which
// is most of a proxied request's scheduling cost. A request body is
// written by one extra goroutine so an upstream may answer before reading
// all of it. It is safe for concurrent use.
type h1Transport struct {
	dial func(ctx context.Context, addr string) (net.Conn, error)
	// cb, when set, is the cluster's circuit breaker: at max_connections a
	// request waits (as pending) for a pooled or closed connection.
	cb *circuit

	mu    sync.Mutex
	idle  map[string][]*upstreamConn // per endpoint, most recently used last
	sweep *time.Timer                // closes expired idle connections
}

// upstreamConn is one upstream connection with its buffers.
type upstreamConn struct {
	conn net.Conn
	// lim caps what reading a response head takes from conn (through
	// br): an upstream cannot make the proxy hold an endless head.
	lim    headLimitReader
	br     *bufio.Reader
	bw     *bufio.Writer
	addr   string
	idleAt time.Time
	// written counts the bytes written through bw (by one goroutine at
	// a time: an exchange's writer).
	written int64
	keys    []string // header names, writeRequestHead's scratch
	// closeConn closes conn: made once, for watchExchange.
	closeConn func()
	// lb is the body of a response read by readResponseHead (one
	// exchange at a time uses it).
	lb lengthBody
}

func newH1Transport(dial func(ctx context.Context, addr string) (net.Conn, error)) *h1Transport {
	return &h1Transport{dial: dial, idle: map[string][]*upstreamConn{}}
}

// errStaleConn marks a pooled connection the upstream had closed before the
// request got any answer.
var errStaleConn = errors.New("pooled upstream connection was closed")

// errUnrequestedUpgrade marks a 101 answering a request that asked for no
// protocol upgrade.
var errUnrequestedUpgrade = errors.New("upstream switched protocols without an upgrade request")

// errNothingWritten marks a failed exchange that wrote no byte of the
// request to the connection.
var errNothingWritten = errors.New("nothing was written to the upstream")

// RoundTrip sends req to req.URL.Host and returns the response; its body
// gives the connection back to the pool once read to the end. A request
// that finds a pooled connection closed is retried once on a new
// connection under net/http's rule: only if it may be sent twice
// (replayable) or nothing of it reached the old connection. A request with
// a body is never retried: part of the body may have been consumed.
func (t *h1Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	return t.roundTrip(req, nil)
}

// roundTrip is RoundTrip, with the response read into xs when set.
func (t *h1Transport) roundTrip(req *http.Request, xs *exchScratch) (*http.Response, error) {
	replay := replayable(req)
	for attempt := 0; ; attempt++ {
		pc, reused, err := t.getConn(req.Context(), req.URL.Host, replay)
		if err != nil {
			return nil, err
		}
		resp, err := t.exchange(pc, req, reused, xs)
		if attempt == 0 && errors.Is(err, errStaleConn) && (replay || errors.Is(err, errNothingWritten)) {
			continue
		}
		return resp, err
	}
}

// replayable reports whether req may be sent again after it may already
// have reached the upstream: it has no body to send again and an
// idempotent method (GET, HEAD, OPTIONS, TRACE) or an idempotency key
// header, as net/http decides.
func replayable(req *http.Request) bool {
	if req.Body != nil && req.Body != http.NoBody {
		return false
	}
	switch req.Method {
	case "", http.MethodGet, http.MethodHead, http.MethodOptions, http.MethodTrace:
		return true
	}
	_, key := req.Header["Idempotency-Key"]
	_, xkey := req.Header["X-Idempotency-Key"]
	return key || xkey
}

// getConn returns a pooled connection to addr or dials one. A pooled
// connection used for a request that cannot be replayed is first checked
// for a close from the upstream.
func (t *h1Transport) getConn(ctx context.Context, addr string, replay bool) (*upstreamConn, bool, error) {
	var c net.Conn
	for c == nil {
		for {
			pc := t.popIdle(addr)
			if pc == nil {
				break
			}
			if replay || connAlive(pc.conn) {
				return pc, true, nil
			}
			pc.conn.Close()
		}
		var err error
		if c, err = t.dialLimited(ctx, addr); err != nil {
			return nil, false, err
		}
	}
	pc := &upstreamConn{conn: c, addr: addr, lim: headLimitReader{r: c, n: -1}}
	pc.br = bufio.NewReaderSize(&pc.lim, upstreamBufferSize)
	pc.closeConn = func() { c.Close() }
	pc.bw = bufio.NewWriterSize(pc, upstreamBufferSize)
	return pc, false, nil
}

// Write writes to the connection, counting the bytes written.
func (pc *upstreamConn) Write(p []byte) (int, error) {
	n, err := pc.conn.Write(p)
	pc.written += int64(n)
	return n, err
}

// exchange writes req on pc and reads the final response head (into xs
// when set). The connection is closed when the request's context ends
// before the body has been read.
func (t *h1Transport) exchange(pc *upstreamConn, req *http.Request, reused bool, xs *exchScratch) (*http.Response, error) {
	ctx := req.Context()
	stop := watchExchange(ctx, pc.closeConn)
	var wrote *bodyWrite // nil: written before reading
	if req.Body == nil || req.Body == http.NoBody {
		before := pc.written
		if err := writeRequest(pc, req); err != nil {
			switch {
			case reused && pc.written == before:
				err = fmt.Errorf("%w: %w: %w", errStaleConn, errNothingWritten, err)
			case reused:
				err = fmt.Errorf("%w: %w", errStaleConn, err)
			}
			return pc.fail(ctx, stop, nil, err)
		}
	} else {
		wrote = &bodyWrite{done: make(chan error, 1), abortRead: abortBodyRead(req, xs)}
		go func() { wrote.done <- writeRequest(pc, req) }()
	}
	pc.lim.n = upstreamMaxHeaderBytes
	if _, err := pc.br.Peek(1); err != nil {
		if reused && ctx.Err() == nil {
			err = fmt.Errorf("%w: %w", errStaleConn, err)
		}
		return pc.fail(ctx, stop, wrote, err)
	}
	resp, err := readFinalResponse(pc, req, xs)
	pc.lim.n = -1
	if err != nil {
		return pc.fail(ctx, stop, wrote, err)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		if upgradeType(req.Header) == "" {
			// Relaying it would make the client's connection a raw
			// tunnel past per-request routing and authorization.
			return pc.fail(ctx, stop, wrote, errUnrequestedUpgrade)
		}
		// The relay reads the downstream connection from here on: the
		// request body, which precedes the new protocol's bytes, must have
		// been read and written upstream first (while the request's
		// context lasts).
		if wrote != nil {
			select {
			case err := <-wrote.done:
				if err != nil {
					return pc.fail(ctx, stop, nil, err)
				}
			case <-ctx.Done():
				return pc.fail(ctx, stop, wrote, ctx.Err())
			}
		}
		stop.stop() // the connection manager owns the upgraded connection now
		resp.Body = &upgradedConn{pc: pc}
		return resp, nil
	}
	var body *upstreamBody
	if xs != nil {
		body = &xs.body
	} else {
		body = new(upstreamBody)
	}
	*body = upstreamBody{
		rc: resp.Body, pc: pc, t: t, stop: stop, wrote: wrote,
		reusable: !resp.Close && !req.Close && (resp.ContentLength >= 0 || len(resp.TransferEncoding) > 0),
	}
	resp.Body = body
	return resp, nil
}

// fail ends a failed exchange: the connection is closed (which also ends a
// body write still in progress, waited for on wrote when set).
func (pc *upstreamConn) fail(ctx context.Context, stop exchStop, wrote *bodyWrite, err error) (*http.Response, error) {
	stop.stop()
	pc.conn.Close()
	wrote.end()
	if ctx.Err() != nil {
		return nil, fmt.Errorf("failed to proxy the request: %w", ctx.Err())
	}
	return nil, err
}

func writeRequest(pc *upstreamConn, req *http.Request) error {
	var fast bool
	if pc.keys, fast = writeRequestHead(pc.bw, req, pc.keys); !fast {
		if err := req.Write(pc.bw); err != nil {
			return fmt.Errorf("failed to write the request upstream: %w", err)
		}
	}
	if err := pc.bw.Flush(); err != nil {
		return fmt.Errorf("failed to write the request upstream: %w", err)
	}
	return nil
}

// readFinalResponse reads response heads until a final one (1xx other than
// 101 are informational and dropped).
func readFinalResponse(pc *upstreamConn, req *http.Request, xs *exchScratch) (*http.Response, error) {
	for {
		resp, err := readResponse(pc.br, req, &pc.lb, xs)
		if err != nil {
			return nil, fmt.Errorf("failed to read the upstream response: %w", err)
		}
		if resp.StatusCode >= 200 || resp.StatusCode == http.StatusSwitchingProtocols {
			return resp, nil
		}
	}
}

// upstreamBody is a response body that returns its connection to the pool
// when read to the end, and closes it if abandoned earlier.
type upstreamBody struct {
	rc       io.ReadCloser
	pc       *upstreamConn
	t        *h1Transport
	stop     exchStop
	wrote    *bodyWrite
	reusable bool
	done     bool
}

// bodyWrite is a request body being written upstream by its own goroutine
// (done reports how it ended) while the response is read.
type bodyWrite struct {
	done chan error
	// abortRead ends the writer's read of the downstream side.
	abortRead func()
}

// end waits for the writer once the upstream connection is closed, which
// ends a write. A writer still waiting for more of the body, from a client
// that waits for the answer before sending it, is woken by ending its read
// (the downstream connection then closes, as Envoy's does after a response
// that came before the request's end). Nil: nothing to wait for.
func (w *bodyWrite) end() {
	if w == nil {
		return
	}
	select {
	case <-w.done:
		return
	default:
	}
	w.abortRead()
	<-w.done
}

func (b *upstreamBody) Read(p []byte) (int, error) {
	if b.done {
		return 0, io.EOF
	}
	n, err := b.rc.Read(p)
	if err == io.EOF {
		b.finish(true)
	} else if err != nil {
		b.finish(false)
	}
	return n, err
}

func (b *upstreamBody) Close() error {
	b.finish(false)
	return nil
}

// finish releases the connection once: back to the pool if the body was
// read to its end, the request fully written and the context still live;
// closed otherwise. It waits on an upstream that stopped reading the
// request body for upstreamWriteWait at most.
func (b *upstreamBody) finish(eof bool) {
	if b.done {
		return
	}
	b.done = true
	live := b.stop.stop() // false: the context ended and closed the connection
	keep := eof && live && b.reusable
	if b.wrote != nil {
		keep = b.settleWrite(keep)
	}
	if keep {
		b.t.putIdle(b.pc)
		return
	}
	b.pc.conn.Close()
}

// settleWrite waits for the request body's writer: up to
// upstreamWriteWait when the connection could be kept (the writer may not
// have reported yet although the upstream read everything), otherwise, or
// after that, it closes the connection to end the write. It reports
// whether the write finished without error in time.
func (b *upstreamBody) settleWrite(keep bool) bool {
	if keep {
		timer := time.NewTimer(upstreamWriteWait)
		defer timer.Stop()
		select {
		case err := <-b.wrote.done:
			return err == nil
		case <-timer.C:
		}
	}
	b.pc.conn.Close()
	b.wrote.end()
	return false
}

// abortBodyRead returns what ends a read of req's body in progress: the
// HTTP/1.1 downstream connection's read deadline (its body is read from
// the connection itself), or closing an HTTP/2 stream's body.
func abortBodyRead(req *http.Request, xs *exchScratch) func() {
	if xs != nil && xs.abortRead != nil {
		return xs.abortRead
	}
	return func() { _ = req.Body.Close() }
}

// upgradedConn is the body of a 101 response: the connection itself, for
// the connection manager to relay both ways.
type upgradedConn struct{ pc *upstreamConn }

func (u *upgradedConn) Read(p []byte) (int, error)  { return u.pc.br.Read(p) }
func (u *upgradedConn) Write(p []byte) (int, error) { return u.pc.conn.Write(p) }
func (u *upgradedConn) Close() error                { return u.pc.conn.Close() }

// SetDeadline sets the connection's read and write deadlines.
func (u *upgradedConn) SetDeadline(t time.Time) error { return u.pc.conn.SetDeadline(t) }

func (t *h1Transport) popIdle(addr string) *upstreamConn {
	t.mu.Lock()
	defer t.mu.Unlock()
	list := t.idle[addr]
	for len(list) > 0 {
		pc := list[len(list)-1]
		list[len(list)-1] = nil
		list = list[:len(list)-1]
		if time.Since(pc.idleAt) < upstreamIdleTimeout {
			t.idle[addr] = list
			return pc
		}
		pc.conn.Close()
	}
	delete(t.idle, addr)
	return nil
}

func (t *h1Transport) putIdle(pc *upstreamConn) {
	if pc.br.Buffered() > 0 {
		// Bytes past the end of the response answer no request: they
		// would be read as the answer to the next one.
		pc.conn.Close()
		return
	}
	pc.idleAt = time.Now()
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.idle[pc.addr]) >= upstreamMaxIdlePerHost {
		pc.conn.Close()
		return
	}
	t.idle[pc.addr] = append(t.idle[pc.addr], pc)
	if t.sweep == nil {
		t.sweep = time.AfterFunc(upstreamIdleTimeout, t.sweepIdle)
	}
	if t.cb != nil {
		t.cb.pooled()
	}
}

// sweepIdle closes connections idle longer than the timeout and re-arms
// itself while any are left.
func (t *h1Transport) sweepIdle() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.sweep = nil
	for addr, list := range t.idle {
		kept := list[:0]
		for _, pc := range list {
			if time.Since(pc.idleAt) >= upstreamIdleTimeout {
				pc.conn.Close()
				continue
			}
			kept = append(kept, pc)
		}
		clear(list[len(kept):])
		if len(kept) == 0 {
			delete(t.idle, addr)
		} else {
			t.idle[addr] = kept
		}
	}
	if len(t.idle) > 0 {
		t.sweep = time.AfterFunc(upstreamIdleTimeout/2, t.sweepIdle)
	}
}

// CloseIdleConnections closes every pooled connection (endpoints or TLS
// settings changed); connections in use are closed when released.
func (t *h1Transport) CloseIdleConnections() {
	t.mu.Lock()
	idle := t.idle
	t.idle = map[string][]*upstreamConn{}
	if t.sweep != nil {
		t.sweep.Stop()
		t.sweep = nil
	}
	t.mu.Unlock()
	for _, list := range idle {
		for _, pc := range list {
			pc.conn.Close()
		}
	}
}

// connAlive reports whether an idle connection is still open: a
// non-blocking peek at its socket sees no end of stream and no error.
// Pending bytes (a TLS session ticket, say) count as alive.
func connAlive(c net.Conn) bool {
	if cn, ok := c.(*closeNotifyConn); ok {
		c = cn.Conn
	}
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	sc, ok := c.(syscall.Conn)
	if !ok {
		return true
	}
	rc, err := sc.SyscallConn()
	if err != nil {
		return false
	}
	alive := true
	err = rc.Read(func(fd uintptr) bool {
		var b [1]byte
		n, _, err := unix.Recvfrom(int(fd), b[:], unix.MSG_PEEK|unix.MSG_DONTWAIT)
		alive = n > 0 || errors.Is(err, unix.EAGAIN)
		return true
	})
	return err == nil && alive
}
