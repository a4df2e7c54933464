package rpc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/internal/httpsrv"
	"github.com/meshlet/meshlet/structs"
)

// request is one call, sent to one server after another.
type request struct {
	what           string // for errors: "register node"
	method, path   string
	query          url.Values
	body           []byte
	nodeID, secret string
	// token is the ACL secret of the caller the call is made for (a
	// client agent's API request), sent as HeaderToken; "" sends none.
	token string
	// timeout bounds one attempt on one server.
	timeout time.Duration
	// write: a call the leader takes (retried while there is no leader).
	write bool
	// mesh: a mesh call, whose refusals carry the intention and connect
	// sentinels (connectAnswerError).
	mesh bool
	// retried: a server failed to answer this call (it may have acted on
	// it nevertheless); later attempts carry headerRetry.
	retried bool
}

// serverError is a failure that sends the call to the next server: the
// server could not be reached, failed (5xx) or has no leader.
type serverError struct {
	msg        string
	noLeader   bool
	retryAfter time.Duration
}

func (e *serverError) Error() string { return e.msg }

// Backoff between rounds over the server list while there is no leader.
const (
	minBackoff = 100 * time.Millisecond
	maxBackoff = 2 * time.Second
)

// call sends req to the servers, from the preferred one on, until one
// answers; out (if not nil) receives the answer. While the servers answer
// that there is no leader, a write tries the list again with backoff
// within the call's timeout.
func (c *Client) call(ctx context.Context, req *request, out any) error {
	if c.ctx.Err() != nil {
		return fmt.Errorf("failed to %s: %w", req.what, ErrClosed)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stop := context.AfterFunc(c.ctx, cancel)
	defer stop()
	deadline := time.Now().Add(c.cfg.Timeout)
	backoff := minBackoff
	for {
		wait, err := c.round(ctx, req, out)
		switch {
		case err == nil:
			return nil
		case c.ctx.Err() != nil:
			return fmt.Errorf("failed to %s: %w", req.what, ErrClosed)
		case ctx.Err() != nil:
			return fmt.Errorf("failed to %s: %w", req.what, ctx.Err())
		case wait == 0 || !req.write:
			return err
		}
		wait = min(max(wait, backoff), maxBackoff)
		if time.Now().Add(wait).After(deadline) {
			return err
		}
		c.logger.Debug("no cluster leader; retrying", "call", req.what, "after", wait)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
		}
		backoff = min(backoff*2, maxBackoff)
	}
}

// round tries each server once. It returns nil on the first answer, a
// final error (4xx, cancelled) at once, or an error naming every server;
// retry > 0 when some server said there was no leader (what it asked to
// wait, at least minBackoff).
func (c *Client) round(ctx context.Context, req *request, out any) (retry time.Duration, err error) {
	n := len(c.cfg.Servers)
	start := int(c.preferred.Load())
	var fails []string
	noLeader := false
	for i := range n {
		k := (start + i) % n
		addr := c.cfg.Servers[k]
		err := c.attempt(ctx, addr, req, out)
		if err == nil {
			if k != start {
				c.preferred.Store(int64(k))
				c.logger.Info("switched to server", "server", addr)
			}
			return 0, nil
		}
		var se *serverError
		if ctx.Err() != nil || !errors.As(err, &se) {
			return 0, err
		}
		if se.noLeader {
			noLeader = true
			retry = max(retry, se.retryAfter, minBackoff)
		}
		c.logger.Debug("server failed; trying the next", "server", addr, "call", req.what, "error", err)
		fails = append(fails, addr+": "+se.msg)
		req.retried = true
	}
	if noLeader {
		return retry, fmt.Errorf("failed to %s: %w (%w): %s", req.what, ErrNoServers, ErrNoLeader, strings.Join(fails, "; "))
	}
	return 0, fmt.Errorf("failed to %s: %w: %s", req.what, ErrNoServers, strings.Join(fails, "; "))
}

// attempt sends req to one server.
func (c *Client) attempt(ctx context.Context, addr string, req *request, out any) error {
	ctx, cancel := context.WithTimeout(ctx, req.timeout)
	defer cancel()
	u := url.URL{Scheme: c.scheme, Host: addr, Path: req.path}
	if req.query != nil {
		u.RawQuery = req.query.Encode()
	}
	var body io.Reader
	if req.body != nil {
		body = bytes.NewReader(req.body)
	}
	hr, err := http.NewRequestWithContext(ctx, req.method, u.String(), body)
	if err != nil {
		return fmt.Errorf("failed to %s: %w", req.what, err)
	}
	hr.Header.Set(HeaderNodeID, req.nodeID)
	hr.Header.Set(HeaderNodeSecret, req.secret)
	if req.token != "" {
		hr.Header.Set(HeaderToken, req.token)
	}
	if req.retried {
		hr.Header.Set(headerRetry, "1")
	}
	if body != nil {
		hr.Header.Set("Content-Type", "application/json")
	}
	resp, err := c.http.Do(hr)
	if err != nil {
		return &serverError{msg: oneLine(err.Error())}
	}
	defer func() { _ = resp.Body.Close() }()
	rd := http.MaxBytesReader(nil, resp.Body, MaxBodyBytes)
	if resp.StatusCode == http.StatusOK {
		if out == nil {
			_, _ = io.Copy(io.Discard, rd)
			return nil
		}
		if err := httpsrv.DecodeJSON(rd, out); err != nil {
			return &serverError{msg: "bad answer: " + oneLine(err.Error())}
		}
		return nil
	}
	if req.mesh {
		return connectAnswerError(req, addr, resp, rd)
	}
	return answerError(req, addr, resp, rd)
}

// answerError turns a failed answer into the call's error: a serverError
// (try the next server) for 5xx, a final error otherwise.
func answerError(req *request, addr string, resp *http.Response, rd io.Reader) error {
	var er errorResponse
	msg := resp.Status
	if err := json.NewDecoder(io.LimitReader(rd, 64<<10)).Decode(&er); err == nil && er.Error != "" {
		msg = oneLine(er.Error)
	}
	code := resp.Header.Get(headerErrorCode)
	switch {
	case resp.StatusCode == http.StatusServiceUnavailable && code == codeNoLeader:
		ra := time.Second
		if s, err := strconv.Atoi(resp.Header.Get("Retry-After")); err == nil && s >= 0 {
			ra = time.Duration(s) * time.Second
		}
		return &serverError{msg: msg, noLeader: true, retryAfter: ra}
	case resp.StatusCode >= 500:
		return &serverError{msg: msg}
	case resp.StatusCode == http.StatusForbidden:
		return fmt.Errorf("failed to %s: %w: %s (server %s)", req.what, ErrForbidden, trimSentinel(msg, ErrForbidden), addr)
	case resp.StatusCode == http.StatusNotFound && code == codeUnknownNode:
		return fmt.Errorf("failed to %s: %w: %s (server %s)", req.what, structs.ErrUnknownNode, trimSentinel(msg, structs.ErrUnknownNode), addr)
	case resp.StatusCode == http.StatusConflict && code == codeIDTaken:
		return fmt.Errorf("failed to %s: %w: %s (server %s)", req.what, catalog.ErrIDTaken, trimSentinel(msg, catalog.ErrIDTaken), addr)
	case resp.StatusCode == http.StatusBadRequest || resp.StatusCode == http.StatusRequestEntityTooLarge:
		return fmt.Errorf("failed to %s: %w: %s (server %s)", req.what, ErrBadRequest, trimSentinel(msg, ErrBadRequest), addr)
	}
	return fmt.Errorf("failed to %s: unexpected answer %s from server %s: %s", req.what, resp.Status, addr, msg)
}

// trimSentinel drops a sentinel's text the server put in front of msg, so
// that it is not said twice.
func trimSentinel(msg string, sentinel error) string {
	if rest, ok := strings.CutPrefix(msg, sentinel.Error()+": "); ok {
		return rest
	}
	return msg
}

func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}
