// Package rpc carries the client role's calls to the servers
// (client.ServerConn: RegisterNode, NodeAllocs, UpdateAllocs, Heartbeat)
// over the network: HTTP/2 over mutual TLS with JSON bodies on the RPC port
// (4647), or plain HTTP/1.1 when no TLS is configured (insecure; both sides
// log a warning).
//
// Server side (NewServer): a peer must present a certificate signed by the
// cluster CA whose role (its DNS name <role>.<region>.<domain>) is "client"
// or "server"; a "cli" certificate is refused with 403. A node then proves
// itself with its node ID and node secret (headers X-Meshlet-Node-ID and
// X-Meshlet-Node-Secret, on every call): the first registration of a node ID
// records the secret (stored by the Backend in Node.SecretID), every later
// call for that ID must present the same secret. A node reads only its own
// allocations and updates only allocations placed on it.
//
// Writes (RegisterNode, UpdateAllocs, Heartbeat) are made on the leader: a
// follower forwards them to the leader's RPC address with its own
// certificate (DialTLS), keeping the node headers, and adds
// X-Meshlet-Forwarded. The leader re-checks the node secret; the original
// peer's certificate cannot be forwarded, so the leader accepts a forwarded
// call only from a peer whose certificate role is "server" (the follower
// checked the original peer's role). A forwarded call is never forwarded
// again. With no leader (an election in progress) a write gets 503 with
// Retry-After. Reads (NodeAllocs) are served by any server from its own
// state.
//
// Client side (NewClient): calls go to one server of the list, the last
// that answered; on a connection error or a 5xx the call moves to the next,
// and fails only after every server failed (ErrNoServers, naming each). When
// the servers answer that there is no leader, the call retries the list
// with backoff until its timeout. NodeAllocs long-polls (index and wait) and
// polls again until the index passes minIndex, as the in-process server
// blocks.
//
// Mesh calls (ServerConfig.Connect; connect.go): a client agent follows
// the mesh's cluster-wide state (catalog registrations, intentions, CA
// roots) over one stream, GET /v1/rpc/connect/watch, newline-delimited
// JSON meshstate.Batch values, a Reset first, with keepalive lines ("{}")
// every ConnectKeepalive; the Client (FollowConnect) reconnects to the
// next server when a stream breaks or stays silent for three keepalive
// intervals, and the new stream starts with a Reset again. A node
// registers its allocations' services (PUT and DELETE
// /v1/rpc/connect/alloc/<alloc-id>: only allocations placed on it, only
// under its own node ID), has leaf CSRs signed (POST /v1/rpc/connect/sign:
// only for services that one of its running allocations declares, the
// SPIFFE identity check) and writes intentions (POST
// /v1/rpc/connect/intentions, errors keeping the intention package's
// sentinels). None of them needs the leader: the servers' store writes
// compare-and-swap from any server.
//
// Concurrency: Server and Client are safe for concurrent use.
package rpc

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/meshlet/meshlet/structs"
)

// Sentinel errors.
var (
	// ErrForbidden: the peer's certificate or the node's credentials do
	// not allow the call (HTTP 403).
	ErrForbidden = errors.New("permission denied")
	// ErrNoServers: every server of the client's list failed.
	ErrNoServers = errors.New("no RPC server could serve the call")
	// ErrNoLeader: the cluster has no leader to take a write (HTTP 503).
	// A Backend's write may return an error wrapping it.
	ErrNoLeader = errors.New("no cluster leader")
	// ErrBadRequest: the call is malformed (HTTP 400). A Backend may wrap
	// it for input it rejects.
	ErrBadRequest = errors.New("bad request")
	// ErrClosed: the Client was closed.
	ErrClosed = errors.New("rpc client closed")
)

// Headers of the protocol.
const (
	HeaderNodeID     = "X-Meshlet-Node-ID"
	HeaderNodeSecret = "X-Meshlet-Node-Secret" // never logged
	// HeaderToken carries the ACL secret of the caller a client agent
	// makes a mesh write for (never logged).
	HeaderToken = "X-Meshlet-Token"
	// HeaderForwarded marks a call a follower forwarded to the leader.
	HeaderForwarded = "X-Meshlet-Forwarded"
	// headerRetry marks a call the client sends again after a server
	// failed to answer it (a timeout may hide a write that committed).
	headerRetry = "X-Meshlet-Retry"
	// headerErrorCode carries a machine-readable error kind.
	headerErrorCode = "X-Meshlet-Error"
)

// Paths of the calls.
const (
	pathRegister  = "/v1/rpc/node/register"
	pathAllocs    = "/v1/rpc/node/allocs"
	pathUpdate    = "/v1/rpc/node/allocs/update"
	pathHeartbeat = "/v1/rpc/node/heartbeat"

	pathConnectWatch      = "/v1/rpc/connect/watch"
	pathConnectAlloc      = "/v1/rpc/connect/alloc/" // + <alloc-id>
	pathConnectSign       = "/v1/rpc/connect/sign"
	pathConnectIntentions = "/v1/rpc/connect/intentions"
	pathConnectRoots      = "/v1/rpc/connect/roots"
	pathConnectCARotate   = "/v1/rpc/connect/ca/rotate"
)

// Error codes (headerErrorCode) that do not follow from the status alone.
const (
	codeNoLeader    = "no_leader"
	codeUnknownNode = "unknown_node"
	codeShutdown    = "shutting_down"
	codeIDTaken     = "id_taken"
)

const (
	// MaxBodyBytes bounds a request or response body.
	MaxBodyBytes = 16 << 20
	// DefaultMaxBlockingWait caps one NodeAllocs long-poll on a server, as
	// Nomad's blocking queries.
	DefaultMaxBlockingWait = 5 * time.Minute
	// DefaultBlockingWait is how long a client asks one long-poll to wait.
	DefaultBlockingWait = time.Minute
	// DefaultTimeout bounds a non-blocking call.
	DefaultTimeout = 10 * time.Second
	// retryAfter is what a server without leader tells clients to wait.
	retryAfter = time.Second
	// maxNodeIDLen bounds a node ID.
	maxNodeIDLen = 128
)

// allocsResponse is the body of a NodeAllocs answer.
type allocsResponse struct {
	Allocs []*structs.Allocation `json:"Allocs"`
	Index  uint64                `json:"Index"`
}

// heartbeatRequest and heartbeatResponse are the bodies of a Heartbeat.
type heartbeatRequest struct {
	NodeID string `json:"NodeID"`
}

type heartbeatResponse struct {
	HeartbeatTTL time.Duration `json:"HeartbeatTTL"`
}

// errorResponse is the body of every failed call.
type errorResponse struct {
	Error string `json:"Error"`
}

// writeJSON writes v as the 200 answer.
func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_ = json.NewEncoder(w).Encode(v)
}

// writeError writes a one-line error answer with an optional code.
func writeError(w http.ResponseWriter, status int, code, format string, args ...any) {
	h := w.Header()
	h.Set("Content-Type", "application/json")
	if code != "" {
		h.Set(headerErrorCode, code)
	}
	if status == http.StatusServiceUnavailable && code == codeNoLeader {
		h.Set("Retry-After", fmt.Sprint(int(retryAfter/time.Second)))
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(errorResponse{Error: fmt.Sprintf(format, args...)})
}
