package sidecar

import (
	"context"
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
