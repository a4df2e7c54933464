package sidecar

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// errRouteTimeout is the cause of a request context that ended because
// the route's timeout passed.
var errRouteTimeout = fmt.Errorf("route timeout: %w", context.DeadlineExceeded)

// reqContext gives an HTTP/1.1 connection's requests their context: one
// cancelable child of the listener's context, shared by the connection's
// requests one after another, and one reusable timer for the route
// timeout. That replaces a context.WithTimeout per request (its timer,
// done channel and registration with the listener's context) and keeps the
// upstream exchanges' context.AfterFunc registrations in a map that
// already exists. A timeout cancels the context (cause errRouteTimeout);
// the next request then gets a new one. Requests on one connection never
// overlap (HTTP/2 streams use their own contexts).
type reqContext struct {
	parent context.Context

	mu     sync.Mutex
	ctx    context.Context
	cancel context.CancelCauseFunc
	timer  *time.Timer
	armed  bool // a request is running with the timer set
	fired  bool // the timer cancelled ctx
	// deadline is when the running request's timeout ends: a timer
	// callback that started late (its request ended, another began) finds
	// it in the future and cancels nothing.
	deadline time.Time
}

// begin returns the context for the next request, with the route timeout
// d (0: none) running.
func (r *reqContext) begin(d time.Duration) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ctx == nil || r.fired || r.ctx.Err() != nil {
		if r.cancel != nil {
			r.cancel(context.Canceled)
		}
		r.ctx, r.cancel = context.WithCancelCause(r.parent)
		r.fired = false
	}
	if d > 0 {
		r.armed = true
		r.deadline = time.Now().Add(d)
		if r.timer == nil {
			r.timer = time.AfterFunc(d, r.expire)
		} else {
			r.timer.Reset(d)
		}
	}
	return r.ctx
}

// expire runs when the timer fires: it cancels the running request.
func (r *reqContext) expire() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.armed && !time.Now().Before(r.deadline) {
		r.fired = true
		r.cancel(errRouteTimeout)
	}
}

// end stops the request's timer.
func (r *reqContext) end() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.armed = false
	if r.timer != nil {
		r.timer.Stop()
	}
}

// timedOut reports whether ctx (one begin returned) ended by its route
// timeout.
func timedOut(ctx context.Context) bool {
	return errors.Is(context.Cause(ctx), errRouteTimeout)
}

// close releases the context (the connection has ended).
func (r *reqContext) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.armed = false
	if r.timer != nil {
		r.timer.Stop()
	}
	if r.cancel != nil {
		r.cancel(context.Canceled)
	}
}
