package sidecar

import "net/http"

// exchScratch is an HTTP/1.1 downstream connection's storage for the
// upstream exchanges of its requests: the response read from the upstream,
// its header map and value slice, and the two wrappers of its body (the
// pooled connection's and the circuit breaker's). The connection serves
// one request at a time and is done with the response (written downstream,
// its body closed) before it reads the next request, and a retried request
// closes the failed attempt's response before the next attempt, so one
// set serves every exchange instead of five allocations each. It belongs
// to the downstream connection, not to the pooled upstream one: an
// upstream connection goes back to the pool as soon as its body is read,
// while the downstream side may still be using the response. HTTP/2
// streams run concurrently and pass none.
type exchScratch struct {
	resp http.Response
	hdr  headerScratch
	body upstreamBody
	cb   requestBody
	// abortRead ends a read of the downstream connection in progress (and
	// every later one): the request body's writer may be waiting for bytes
	// a stalled client never sends after the upstream already answered.
	abortRead func()
}
