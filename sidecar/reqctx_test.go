package sidecar

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// TestReqContextTimeoutAndReuse: a route timeout cancels the running
// request's context with errRouteTimeout; the next request gets a live
// context; a request that ended before its timeout is not cancelled later;
// closing ends the context and the listener's cancel reaches it.
func TestReqContextTimeoutAndReuse(t *testing.T) {
	parent, cancelParent := context.WithCancel(context.Background())
	defer cancelParent()
	r := &reqContext{parent: parent}

	ctx := r.begin(20 * time.Millisecond)
	select {
	case <-ctx.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("route timeout did not cancel the request context")
	}
	if !timedOut(ctx) {
		t.Fatalf("cause = %v, want the route timeout", context.Cause(ctx))
	}
	r.end()

	next := r.begin(30 * time.Millisecond)
	if next.Err() != nil || next == ctx {
		t.Fatalf("next request got an ended or the same context (err %v)", next.Err())
	}
	r.end() // done before the timeout
	time.Sleep(80 * time.Millisecond)
	if next.Err() != nil {
		t.Fatalf("a timer stopped at the end of the request still cancelled: %v", context.Cause(next))
	}
	if again := r.begin(0); again != next {
		t.Fatal("a live context was not reused")
	}
	r.end()

	cancelParent()
	if next.Err() == nil || timedOut(next) {
		t.Fatalf("listener cancel: err %v, cause %v", next.Err(), context.Cause(next))
	}
	r.close()
}

func TestReqContextClose(t *testing.T) {
	r := &reqContext{parent: context.Background()}
	ctx := r.begin(time.Hour)
	r.close()
	if ctx.Err() == nil || timedOut(ctx) {
		t.Fatalf("closed connection's context: err %v, cause %v", ctx.Err(), context.Cause(ctx))
	}
}

// A timer callback that started late — its request ended and the next one
// began before it took the lock — cancels nothing: the next request (with
// its own, later deadline) runs on.
func TestReqContextLateTimerSparesNextRequest(t *testing.T) {
	r := &reqContext{parent: context.Background()}
	r.begin(time.Nanosecond)
	r.end()
	next := r.begin(time.Hour)
	defer r.end()
	r.expire() // the first request's callback, running late
	if err := next.Err(); err != nil {
		t.Fatalf("the next request's context ended (%v, cause %v) by the previous request's timer", err, context.Cause(next))
	}
}

// closeCounter counts the calls of its close function, as an exchange's
// connection closer.
type closeCounter struct{ n atomic.Int32 }

func (c *closeCounter) close() { c.n.Add(1) }

// waitCalls waits (bounded) until c was called want times, then checks it
// stays there.
func (c *closeCounter) waitCalls(t *testing.T, want int32) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for c.n.Load() < want && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(20 * time.Millisecond)
	if got := c.n.Load(); got != want {
		t.Fatalf("closer called %d times, want %d", got, want)
	}
}

// TestWatchExchange: an exchange watching its connection's request context
// has its connection closed once, when the route timeout (or the
// connection's end) cancels the context, and not after its stop; stop
// reports what context.AfterFunc's stop would.
func TestWatchExchange(t *testing.T) {
	r := &reqContext{parent: context.Background()}
	defer r.close()

	// Stopped before the context ends: never closed.
	var kept closeCounter
	ctx := r.begin(time.Hour)
	w := watchExchange(ctx, kept.close)
	if w.cc == nil {
		t.Fatal("the connection's own context was not watched through its slot")
	}
	if !w.stop() {
		t.Fatal("stop of a live watch reported that the closer ran")
	}
	if w.stop() {
		t.Fatal("a second stop reported a closer still waiting")
	}
	r.end()

	// The route timeout fires: closed once, and stop says so.
	var timedOutConn closeCounter
	ctx = r.begin(10 * time.Millisecond)
	w = watchExchange(ctx, timedOutConn.close)
	<-ctx.Done()
	timedOutConn.waitCalls(t, 1)
	if w.stop() {
		t.Fatal("stop after the closer ran reported that it kept it from running")
	}
	r.end()
	kept.waitCalls(t, 0)

	// An ended context: the closer runs at once (context.AfterFunc's rule).
	var late closeCounter
	w = watchExchange(ctx, late.close)
	late.waitCalls(t, 1)
	if w.stop() {
		t.Fatal("stop of a watch on an ended context reported a closer still waiting")
	}
}

// TestWatchExchangeStaleContextSparesNext: the end of an earlier context,
// seen late, never closes the connection of an exchange watching the
// context that replaced it.
func TestWatchExchangeStaleContextSparesNext(t *testing.T) {
	r := &reqContext{parent: context.Background()}
	defer r.close()
	first := r.begin(time.Nanosecond)
	<-first.Done()
	r.end()
	var next closeCounter
	ctx := r.begin(time.Hour)
	w := watchExchange(ctx, next.close)
	r.ended(first.(*connCtx).gen) // the first context's callback, running late
	next.waitCalls(t, 0)
	if !w.stop() {
		t.Fatal("the live exchange's watch was cleared by the earlier context's end")
	}
	r.end()
}

// TestWatchExchangeOtherContext: any context but the connection's own
// (HTTP/2 streams, per-try timeouts) is watched by context.AfterFunc.
func TestWatchExchangeOtherContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var c closeCounter
	w := watchExchange(ctx, c.close)
	if w.cc != nil {
		t.Fatal("a foreign context was taken for a connection's own")
	}
	cancel()
	c.waitCalls(t, 1)
	if w.stop() {
		t.Fatal("stop after the closer ran reported that it kept it from running")
	}
}
