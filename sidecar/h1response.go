package sidecar

import (
	"errors"
	"io"
	"net/http"
	"net/http/httputil"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// writeResponse relays an upstream response to the downstream client and
// reports whether the connection stays open. The head and the body share
// the connection's write buffer, so a small response is one write; a body
// that is still arriving is flushed after every piece read (streaming
// responses and trickling known-length ones reach the client as they come).
func (h *h1conn) writeResponse(req *http.Request, resp *http.Response, keep bool) bool {
	keep = h.keepOpen(keep)
	h.c.state.httpStats.rqClass[statusClass(resp.StatusCode)].Add(1)
	bodyAllowed := req.Method != http.MethodHead && resp.StatusCode >= 200 &&
		resp.StatusCode != http.StatusNoContent && resp.StatusCode != http.StatusNotModified
	length := resp.ContentLength
	chunked := false
	if bodyAllowed && length < 0 {
		if req.ProtoAtLeast(1, 1) {
			chunked = true
		} else {
			keep = false // HTTP/1.0: the end of the body is the end of the connection
		}
	}
	removeHopHeaders(resp.Header)
	resp.Header.Del("Content-Length")
	statusLine(h.bw, resp.StatusCode, resp.Status)
	if length >= 0 && (bodyAllowed || req.Method == http.MethodHead) {
		_, _ = h.bw.WriteString("Content-Length: ")
		_, _ = h.bw.Write(strconv.AppendInt(h.bw.AvailableBuffer(), length, 10))
		_, _ = h.bw.WriteString("\r\n")
	}
	if chunked {
		_, _ = h.bw.WriteString("Transfer-Encoding: chunked\r\n")
		if len(resp.Trailer) > 0 {
			_, _ = h.bw.WriteString("Trailer: " + strings.Join(trailerNames(resp.Trailer), ", ") + "\r\n")
		}
	}
	if !keep {
		_, _ = h.bw.WriteString("Connection: close\r\n")
	}
	if resp.Header.Write(h.bw) != nil {
		return false
	}
	_, _ = h.bw.WriteString("\r\n")
	if !bodyAllowed {
		// The upstream sent no body either (the same method, the same
		// status): reading its end gives the connection back to the pool
		// rather than closing it.
		_, _ = resp.Body.Read(nil)
		return h.bw.Flush() == nil && keep
	}
	if !h.copyBody(resp, length, chunked) {
		return false
	}
	return h.bw.Flush() == nil && keep
}

// copyBody relays the response body into the write buffer, chunk-encoding
// it when its length is unknown. It reports false if either side failed
// (the connection cannot carry another request).
func (h *h1conn) copyBody(resp *http.Response, remaining int64, chunked bool) bool {
	if !chunked && remaining >= 0 && remaining <= int64(h.bw.Available()) {
		return h.copySmallBody(resp, remaining)
	}
	var w io.Writer = h.bw
	var cw io.WriteCloser
	if chunked {
		cw = httputil.NewChunkedWriter(h.bw)
		w = cw
	}
	bp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bp)
	buf := *bp
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if _, werr := w.Write(buf[:n]); werr != nil {
				return false
			}
			if remaining > 0 {
				remaining -= int64(n)
			}
			// More to come: what arrived goes out now rather than
			// waiting for the rest.
			if remaining != 0 && h.bw.Flush() != nil {
				return false
			}
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			return false
		}
	}
	if !chunked {
		return true
	}
	if cw.Close() != nil {
		return false
	}
	if resp.Trailer.Write(h.bw) != nil {
		return false
	}
	_, err := h.bw.WriteString("\r\n")
	return err == nil
}

// copySmallBody reads a known-length body that fits in the write buffer's
// free space straight into it (no copy buffer), flushing what has arrived
// whenever more is still to come.
func (h *h1conn) copySmallBody(resp *http.Response, remaining int64) bool {
	for remaining > 0 {
		buf := h.bw.AvailableBuffer()
		n, err := resp.Body.Read(buf[:min(int64(cap(buf)), remaining)])
		if n > 0 {
			if _, werr := h.bw.Write(buf[:n]); werr != nil {
				return false
			}
			remaining -= int64(n)
			if remaining > 0 && h.bw.Flush() != nil {
				return false
			}
		}
		if err == io.EOF {
			return remaining == 0
		}
		if err != nil {
			return false
		}
	}
	// Read the end of the body so the upstream connection goes back to
	// its pool.
	_, err := resp.Body.Read(nil)
	return err == io.EOF || err == nil
}

// trailerNames lists the trailer fields announced or received.
func trailerNames(t http.Header) []string {
	names := make([]string, 0, len(t))
	for k := range t {
		names = append(names, k)
	}
	return names
}

// relayUpgrade answers a 101 and relays both directions between the
// downstream connection and the upstream one until either ends.
func (h *h1conn) relayUpgrade(req *http.Request, resp *http.Response, asked string) {
	up, ok := resp.Body.(io.ReadWriteCloser)
	got := upgradeType(resp.Header)
	if !ok || !strings.EqualFold(got, asked) {
		h.c.state.httpStats.upstreamFail.Add(1)
		h.localReply(req, http.StatusBadGateway, "upstream switched to a protocol other than the one requested", false)
		return
	}
	h.c.state.httpStats.rqClass[1].Add(1)
	removeHopHeaders(resp.Header)
	statusLine(h.bw, resp.StatusCode, resp.Status)
	_, _ = h.bw.WriteString("Connection: Upgrade\r\nUpgrade: " + got + "\r\n")
	if resp.Header.Write(h.bw) != nil {
		return
	}
	_, _ = h.bw.WriteString("\r\n")
	if h.bw.Flush() != nil {
		return
	}
	ri := &upgradeIdle{idle: streamIdle(), conns: [2]deadliner{h.c.Conn}}
	if d, ok := up.(deadliner); ok {
		ri.conns[1] = d
	}
	ri.progress() // arms both connections' deadlines
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		ri.copy(up, h.br) // bytes the client sent after the head, then the socket
		up.Close()
		h.c.Conn.Close()
	}()
	ri.copy(h.c.Conn, up)
	up.Close()
	h.c.Conn.Close()
	wg.Wait()
}

type deadliner interface{ SetDeadline(time.Time) error }

// upgradeIdle ends an upgraded connection's relay after the stream idle
// timeout without a byte read in either direction, as Envoy's
// stream_idle_timeout does for upgraded streams: both connections'
// deadlines (reads and writes) are pushed out as bytes arrive from either
// side, at most every fifth of the timeout, so a read blocked on a quiet
// side that times out while the other side still talks goes on (reads
// are retried; a write that times out ends the relay, a TLS connection's
// writes cannot be retried). A peer that stops reading holds the relay
// for the timeout at most.
type upgradeIdle struct {
	idle  time.Duration
	conns [2]deadliner // downstream, upstream (nil: no deadline)
	last  atomic.Int64 // the last bytes read, in Unix nanoseconds
	armed atomic.Int64 // when the deadlines were last pushed out
}

// progress records bytes read and pushes the deadlines out if they were
// last pushed more than a fifth of the timeout ago.
func (r *upgradeIdle) progress() {
	now := time.Now().UnixNano()
	r.last.Store(now)
	if a := r.armed.Load(); now-a > int64(r.idle/5) && r.armed.CompareAndSwap(a, now) {
		r.setDeadlines(time.Unix(0, now).Add(r.idle))
	}
}

func (r *upgradeIdle) setDeadlines(t time.Time) {
	for _, c := range r.conns {
		if c != nil {
			_ = c.SetDeadline(t)
		}
	}
}

// resume reports whether a read that ended with err may go on: it timed
// out while the other direction read bytes within the timeout (the
// deadlines are then set the timeout after those bytes).
func (r *upgradeIdle) resume(err error) bool {
	if !errors.Is(err, os.ErrDeadlineExceeded) {
		return false
	}
	until := time.Unix(0, r.last.Load()).Add(r.idle)
	if !time.Now().Before(until) {
		return false
	}
	r.setDeadlines(until)
	return true
}

// copy relays src to dst until either fails or src ends or idles out.
func (r *upgradeIdle) copy(dst io.Writer, src io.Reader) {
	bp := copyBuffers.Get().(*[]byte)
	defer copyBuffers.Put(bp)
	buf := *bp
	for {
		n, err := src.Read(buf)
		if n > 0 {
			r.progress()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil && !r.resume(err) {
			return
		}
	}
}
