package rpc

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/meshlet/meshlet/meshstate"
)

const (
	// ConnectKeepalive is how often a mesh feed stream carries a keepalive
	// line ("{}"), so that idle streams are not cut by intermediaries and
	// a client finds a dead server: it gives up on a stream silent for
	// three intervals.
	ConnectKeepalive = 15 * time.Second
	// connectWriteTimeout bounds one write of the stream (a slow or
	// vanished reader is dropped).
	connectWriteTimeout = 30 * time.Second
	// headerKeepalive tells the client the stream's keepalive interval.
	headerKeepalive = "X-Meshlet-Keepalive"
	// maxFeedLine bounds one batch on the stream (a Reset holds the whole
	// mesh state).
	maxFeedLine = 4 * MaxBodyBytes
	// maxFeedReadTimeout caps the client's silence timeout.
	maxFeedReadTimeout = 10 * time.Minute
)

// keepaliveLine is the stream's keepalive: a Batch with nothing in it.
var keepaliveLine = []byte("{}\n")

// feedWriter writes the stream's lines, each flushed and bounded by a
// write deadline; the answer's headers go with the first line.
type feedWriter struct {
	w         http.ResponseWriter
	rc        *http.ResponseController
	keepalive time.Duration
	started   bool
}

func (f *feedWriter) write(line []byte) error {
	if !f.started {
		h := f.w.Header()
		h.Set("Content-Type", "application/x-ndjson")
		h.Set("Cache-Control", "no-store")
		h.Set(headerKeepalive, f.keepalive.String())
		f.w.WriteHeader(http.StatusOK)
		f.started = true
	}
	if err := f.rc.SetWriteDeadline(time.Now().Add(connectWriteTimeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	if _, err := f.w.Write(line); err != nil {
		return err
	}
	if err := f.rc.Flush(); err != nil {
		return err
	}
	// No deadline between writes: an idle stream waits for the next.
	if err := f.rc.SetWriteDeadline(time.Time{}); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}

func (f *feedWriter) batch(b meshstate.Batch) error {
	data, err := json.Marshal(&b)
	if err != nil {
		return fmt.Errorf("failed to encode batch at revision %d: %w", b.Revision, err)
	}
	return f.write(append(data, '\n'))
}

func (s *Server) feedKeepaliveEvery() time.Duration {
	if s.feedKeepalive > 0 {
		return s.feedKeepalive
	}
	return ConnectKeepalive
}

// handleConnectWatch streams the mesh feed to the calling node until it
// leaves, a write fails, the backend's feed ends or the server closes. It
// is not bounded by MaxBlockingWait: the stream lives as long as the
// node follows.
func (s *Server) handleConnectWatch(w http.ResponseWriter, r *http.Request) {
	cb, nodeID, ok := s.connectNode(w, r)
	if !ok {
		return
	}
	ctx, cancel := context.WithCancel(r.Context())
	batches := make(chan meshstate.Batch)
	done := make(chan error, 1)
	go func() {
		done <- cb.Follow(ctx, func(b meshstate.Batch) error {
			select {
			case batches <- b:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		})
	}()
	followEnded := false
	defer func() {
		cancel()
		if !followEnded {
			<-done
		}
	}()
	fw := &feedWriter{w: w, rc: http.NewResponseController(w), keepalive: s.feedKeepaliveEvery()}
	tick := time.NewTicker(fw.keepalive)
	defer tick.Stop()
	s.logger.Debug("node follows the mesh feed", "node_id", nodeID, "remote", remoteOf(r))
	var err error
	for err == nil {
		select {
		case b := <-batches:
			err = fw.batch(b)
		case <-tick.C:
			err = fw.write(keepaliveLine)
		case err = <-done:
			followEnded = true
			if err == nil {
				err = errors.New("the feed ended")
			}
		case <-ctx.Done():
			err = ctx.Err()
		}
	}
	switch {
	case !fw.started:
		// Nothing sent yet: answer the failure as a unary call would.
		s.backendError(w, r, false, err)
	case s.ctx.Err() != nil || r.Context().Err() != nil:
		s.logger.Debug("mesh feed stream ended", "node_id", nodeID, "error", err)
	default:
		s.logger.Warn("mesh feed stream ended", "node_id", nodeID, "error", err)
	}
}

// feedStopped is fn's error, ending FollowConnect.
type feedStopped struct{ err error }

func (e *feedStopped) Error() string { return e.err.Error() }

// FollowConnect follows the mesh feed: it streams batches from one server
// (the client's usual order, from the last that answered) and calls fn
// with each, in order, from one goroutine. When the stream breaks, the
// server goes away or stays silent for three keepalive intervals, it
// follows the next server, with backoff (up to 2 s) while none answers;
// every new stream starts with a Reset batch, so fn's state stays whole.
// It returns only when ctx ends (ctx.Err()), fn returns an error (that
// error) or the Client is closed (ErrClosed).
func (c *Client) FollowConnect(ctx context.Context, fn func(meshstate.Batch) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.ctx, cancel)
	defer stop()
	n := len(c.cfg.Servers)
	k := int(c.preferred.Load())
	backoff := minBackoff
	failures := 0
	for {
		addr := c.cfg.Servers[k%n]
		delivered, err := c.followOne(ctx, addr, k%n, fn)
		var st *feedStopped
		switch {
		case errors.As(err, &st):
			return st.err
		case c.ctx.Err() != nil:
			return fmt.Errorf("failed to follow the mesh feed: %w", ErrClosed)
		case ctx.Err() != nil:
			return ctx.Err()
		}
		if delivered {
			backoff, failures = minBackoff, 0
		}
		failures++
		if failures == 1 || failures%30 == 0 {
			c.logger.Warn("mesh feed stream from server ended; following another", "server", addr, "failures", failures, "error", err)
		} else {
			c.logger.Debug("mesh feed stream from server ended; following another", "server", addr, "failures", failures, "error", err)
		}
		k++
		select {
		case <-time.After(backoff):
		case <-ctx.Done():
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// followOne follows the feed on one server until the stream ends, and
// reports whether it delivered any batch to fn. fn's error comes back as
// a *feedStopped.
func (c *Client) followOne(ctx context.Context, addr string, k int, fn func(meshstate.Batch) error) (delivered bool, err error) {
	resp, watchdog, err := c.openFeed(ctx, addr)
	if err != nil {
		return false, err
	}
	defer watchdog.stop()
	defer func() { _ = resp.Body.Close() }()
	if int(c.preferred.Swap(int64(k))) != k {
		c.logger.Info("switched to server", "server", addr)
	}
	c.logger.Debug("following the mesh feed", "server", addr)
	br := bufio.NewReaderSize(resp.Body, 64<<10)
	first := true
	for {
		line, err := readLine(br, maxFeedLine)
		if err != nil {
			if watchdog.fired() {
				return delivered, fmt.Errorf("server %s sent nothing for %s", addr, watchdog.timeout)
			}
			if errors.Is(err, io.EOF) {
				return delivered, fmt.Errorf("server %s ended the stream", addr)
			}
			return delivered, fmt.Errorf("stream from server %s broke: %s", addr, oneLine(err.Error()))
		}
		var b meshstate.Batch
		if err := json.Unmarshal(line, &b); err != nil {
			return delivered, fmt.Errorf("bad batch from server %s: %s", addr, oneLine(err.Error()))
		}
		if isKeepalive(&b) {
			watchdog.reset()
			continue
		}
		if first && !b.Reset {
			return delivered, fmt.Errorf("server %s began the stream without a reset batch (revision %d)", addr, b.Revision)
		}
		first = false
		watchdog.pause()
		if err := fn(b); err != nil {
			return delivered, &feedStopped{err: err}
		}
		delivered = true
		watchdog.reset()
	}
}

// openFeed sends the watch call to addr and returns the open stream with
// its silence watchdog running.
func (c *Client) openFeed(ctx context.Context, addr string) (*http.Response, *feedWatchdog, error) {
	id, secret, err := c.identity()
	if err != nil {
		return nil, nil, err
	}
	sctx, scancel := context.WithCancel(ctx)
	wd := newFeedWatchdog(3*ConnectKeepalive, scancel)
	u := url.URL{Scheme: c.scheme, Host: addr, Path: pathConnectWatch}
	hr, err := http.NewRequestWithContext(sctx, http.MethodGet, u.String(), nil)
	if err != nil {
		wd.stop()
		return nil, nil, fmt.Errorf("failed to follow the mesh feed: %w", err)
	}
	hr.Header.Set(HeaderNodeID, id)
	hr.Header.Set(HeaderNodeSecret, secret)
	hr.Header.Set("Accept", "application/x-ndjson")
	resp, err := c.http.Do(hr)
	if err != nil {
		wd.stop()
		if wd.fired() {
			return nil, nil, fmt.Errorf("server %s did not answer within %s", addr, wd.timeout)
		}
		return nil, nil, fmt.Errorf("server %s: %s", addr, oneLine(err.Error()))
	}
	if resp.StatusCode != http.StatusOK {
		defer func() { _ = resp.Body.Close() }()
		wd.stop()
		req := &request{what: "follow the mesh feed"}
		return nil, nil, connectAnswerError(req, addr, resp, http.MaxBytesReader(nil, resp.Body, MaxBodyBytes))
	}
	if d, err := time.ParseDuration(resp.Header.Get(headerKeepalive)); err == nil && d > 0 {
		wd.timeout = min(3*d, maxFeedReadTimeout)
	}
	wd.reset()
	return resp, wd, nil
}

// isKeepalive reports whether b carries nothing: a keepalive line.
func isKeepalive(b *meshstate.Batch) bool {
	return b.Revision == 0 && !b.Reset && len(b.Allocs) == 0 && b.Intentions == nil && b.Roots == nil
}

// readLine reads one '\n'-terminated line of at most limit bytes.
func readLine(br *bufio.Reader, limit int) ([]byte, error) {
	var line []byte
	for {
		chunk, err := br.ReadSlice('\n')
		if len(line)+len(chunk) > limit {
			return nil, fmt.Errorf("a batch is larger than %d bytes", limit)
		}
		switch {
		case err == nil && line == nil:
			return chunk, nil
		case err == nil:
			return append(line, chunk...), nil
		case errors.Is(err, bufio.ErrBufferFull):
			line = append(line, chunk...)
		case errors.Is(err, io.EOF) && len(line)+len(chunk) > 0:
			return nil, io.ErrUnexpectedEOF
		default:
			return nil, err
		}
	}
}

// feedWatchdog cancels a stream that stays silent for timeout.
type feedWatchdog struct {
	timeout time.Duration
	timer   *time.Timer
	cancel  context.CancelFunc
	once    sync.Once
	firedCh chan struct{}
}

func newFeedWatchdog(timeout time.Duration, cancel context.CancelFunc) *feedWatchdog {
	wd := &feedWatchdog{timeout: timeout, cancel: cancel, firedCh: make(chan struct{})}
	wd.timer = time.AfterFunc(timeout, func() {
		wd.once.Do(func() { close(wd.firedCh) })
		cancel()
	})
	return wd
}

func (wd *feedWatchdog) fired() bool {
	select {
	case <-wd.firedCh:
		return true
	default:
		return false
	}
}

// reset restarts the silence timeout (unless it fired already).
func (wd *feedWatchdog) reset() {
	if !wd.fired() {
		wd.timer.Reset(wd.timeout)
	}
}

// pause stops the timeout while fn runs (the server waits on us).
func (wd *feedWatchdog) pause() { wd.timer.Stop() }

// stop ends the watchdog and releases the stream's context.
func (wd *feedWatchdog) stop() {
	wd.timer.Stop()
	wd.cancel()
}
