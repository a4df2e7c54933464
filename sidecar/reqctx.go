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
// done channel and registration with the listener's context). The
// upstream exchange running for the connection is watched through one
// slot (see watchExchange) instead of a context.AfterFunc per exchange. A
// timeout cancels the context (cause errRouteTimeout); the next request
// then gets a new one. Requests on one connection never overlap (HTTP/2
// streams use their own contexts).
type reqContext struct {
	parent context.Context

	mu     sync.Mutex
	ctx    *connCtx
	cancel context.CancelCauseFunc
	timer  *time.Timer
	armed  bool // a request is running with the timer set
	fired  bool // the timer cancelled ctx
	// gen counts the contexts made; exch is the running exchange's
	// connection closer, run once when context gen ends.
	gen  uint64
	exch func()
	// deadline is when the running request's timeout ends: a timer
	// callback that started late (its request ended, another began) finds
	// it in the future and cancels nothing.
	deadline time.Time
}

// connCtx is a context reqContext made: the cancelable context itself,
// and where to find the slot that watches its exchange.
type connCtx struct {
	context.Context
	r   *reqContext
	gen uint64
}

// renew makes a new context when there is none or the last one ended.
// The caller holds r.mu.
func (r *reqContext) renew() {
	if r.ctx != nil && !r.fired && r.ctx.Err() == nil {
		return
	}
	if r.cancel != nil {
		r.cancel(context.Canceled)
	}
	var inner context.Context
	inner, r.cancel = context.WithCancelCause(r.parent)
	r.gen++
	gen := r.gen
	r.ctx = &connCtx{Context: inner, r: r, gen: gen}
	r.fired = false
	r.exch = nil
	context.AfterFunc(inner, func() { r.ended(gen) })
}

// current returns the context the next request will run in.
func (r *reqContext) current() context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.renew()
	return r.ctx
}

// begin returns the context for the next request, with the route timeout
// d (0: none) running.
func (r *reqContext) begin(d time.Duration) context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.renew()
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

// ended runs the watched exchange's closer once context gen has ended.
func (r *reqContext) ended(gen uint64) {
	r.mu.Lock()
	f := r.exch
	if gen != r.gen {
		f = nil // a later context's exchange: not this one's to close
	} else {
		r.exch = nil
	}
	r.mu.Unlock()
	if f != nil {
		f()
	}
}

// watch makes f context gen's exchange closer; false if gen is not the
// live context.
func (r *reqContext) watch(gen uint64, f func()) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if gen != r.gen || r.ctx.Err() != nil {
		return false
	}
	r.exch = f
	return true
}

// unwatch clears context gen's exchange closer, reporting whether it was
// still waiting (false: the context ended and it ran, or runs).
func (r *reqContext) unwatch(gen uint64) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if gen != r.gen || r.exch == nil {
		return false
	}
	r.exch = nil
	return true
}

// exchStop ends an exchange's watch on its request's context, as the stop
// function of context.AfterFunc does: stop reports whether it kept the
// closer from running.
type exchStop struct {
	cc     *connCtx    // the watch is cc's slot
	stopAF func() bool // or a context.AfterFunc registration
}

func (s exchStop) stop() bool {
	if s.cc != nil {
		return s.cc.r.unwatch(s.cc.gen)
	}
	return s.stopAF()
}

// watchExchange runs closeConn once ctx ends, until the returned stop is
// called, as context.AfterFunc(ctx, closeConn) would: in the slot of an
// HTTP/1.1 connection's request context, without allocating, or else
// (any other context, or one that has ended already) through
// context.AfterFunc.
func watchExchange(ctx context.Context, closeConn func()) exchStop {
	if cc, ok := ctx.(*connCtx); ok && cc.r.watch(cc.gen, closeConn) {
		return exchStop{cc: cc}
	}
	return exchStop{stopAF: context.AfterFunc(ctx, closeConn)}
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
