package sidecar

import (
	"io"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"sync"
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
	_ = h.c.Conn.SetWriteDeadline(time.Time{}) // the relay writes on its own terms
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = io.Copy(up, h.br) // bytes the client sent after the head, then the socket
		up.Close()
		h.c.Conn.Close()
	}()
	_, _ = io.Copy(h.c.Conn, up)
	up.Close()
	h.c.Conn.Close()
	wg.Wait()
}
