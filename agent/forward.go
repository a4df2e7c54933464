package agent

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"

	"github.com/meshlet/meshlet/client"
	"github.com/meshlet/meshlet/rpc"
	"github.com/meshlet/meshlet/structs"
)

// allocOfClientPath returns the allocation ID (or prefix) of a
// client-local route: /v1/client/fs/logs/{alloc} and
// /v1/client/allocation/{alloc}/exec and /checks.
func allocOfClientPath(path string) string {
	if rest, ok := strings.CutPrefix(path, "/v1/client/fs/logs/"); ok {
		return strings.Split(rest, "/")[0]
	}
	if rest, ok := strings.CutPrefix(path, "/v1/client/allocation/"); ok {
		if id, tail, ok := strings.Cut(rest, "/"); ok && (tail == "exec" || tail == "checks") {
			return id
		}
	}
	return ""
}

// toAllocNode sends a server agent's task log and exec requests for an
// allocation on another node to that node's agent (Nomad's servers
// forward them to the client that runs the allocation); the rest, and
// allocations on this agent's own node, are served by next. With
// tls.http the node is dialed over HTTPS with this agent's certificate.
func (a *Agent) toAllocNode(next http.Handler) (http.Handler, error) {
	dialTLS, err := a.httpDialTLS()
	if err != nil {
		return nil, err
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	transport.TLSClientConfig = dialTLS
	a.cleanups = append(a.cleanups, transport.CloseIdleConnections)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := allocOfClientPath(r.URL.Path)
		if id == "" || a.server == nil {
			next.ServeHTTP(w, r)
			return
		}
		node, err := a.allocNode(r.Context(), id)
		if err != nil || node == nil {
			next.ServeHTTP(w, r) // local, or the error next gives for it
			return
		}
		if node.HTTPAddr == "" {
			http.Error(w, fmt.Sprintf("node %s of allocation %s has no HTTP address to forward to", node.Name, id), http.StatusBadGateway)
			return
		}
		scheme := "http"
		if node.TLSEnabled {
			scheme = "https"
		}
		target := &url.URL{Scheme: scheme, Host: node.HTTPAddr}
		proxy := &httputil.ReverseProxy{Transport: transport, Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(target)
			pr.Out.Host = target.Host
		}}
		proxy.ServeHTTP(w, r)
	}), nil
}

// allocNode is the node of allocation id when that is another node than
// this agent's own (nil when local).
func (a *Agent) allocNode(ctx context.Context, id string) (*structs.Node, error) {
	alloc, err := a.server.Alloc(ctx, id)
	if err != nil {
		return nil, err
	}
	if a.client != nil && alloc.NodeID == a.client.Node().ID {
		return nil, nil
	}
	return a.server.Node(ctx, alloc.NodeID)
}

// localAlloc resolves an allocation of a client-only agent's own node.
func localAlloc(c *client.Client, id string) (*structs.Allocation, error) {
	if c == nil {
		return nil, fmt.Errorf("this agent runs no allocations")
	}
	return c.Alloc(id)
}

// toLeader sends a follower's API writes (job run, stop, drain...) to the
// leader's RPC port, which serves the API to servers, as Nomad's servers
// forward writes; reads are answered here (etcd reads are consistent).
// A request already forwarded once is never forwarded again. The leader's
// address is the RPC backend's cached lookup (at most a second old), and
// rpc.Forwarder relays the request: one shared transport, X-Forwarded-*,
// a 503 naming the missing leader when it cannot be reached.
func (a *Agent) toLeader(next http.Handler) (http.Handler, error) {
	_, dialTLS, err := a.rpcTLS()
	if err != nil {
		return nil, err
	}
	fwd, err := rpc.NewForwarder(dialTLS, a.logger.Named("api_forward"))
	if err != nil {
		return nil, err
	}
	a.cleanups = append(a.cleanups, fwd.Close)
	return leaderForwarding(next, fwd, a.server.RPCBackend().Leader, a.RPCAddr), nil
}

// leaderForwarding forwards the forwardable requests to the leader that
// leader names, and serves the rest with next: on the leader, while no
// leader is known (the write then fails clearly here) and when the
// address is self's own.
func leaderForwarding(next http.Handler, fwd *rpc.Forwarder, leader func() (bool, string), self func() string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !forwardable(r) {
			next.ServeHTTP(w, r)
			return
		}
		isLeader, addr := leader()
		if isLeader || addr == "" || addr == self() {
			next.ServeHTTP(w, r)
			return
		}
		fwd.Forward(w, r, addr)
	})
}

// forwardable: a write to the cluster's state, not yet forwarded, not one
// this agent answers itself (its own allocations, agent operations); of the
// operator calls only a snapshot restore, which the leader makes.
func forwardable(r *http.Request) bool {
	if r.Method == http.MethodGet || r.Method == http.MethodHead || r.Header.Get(rpc.HeaderForwarded) != "" {
		return false
	}
	p := r.URL.Path
	if p == "/v1/operator/snapshot" {
		return true
	}
	return strings.HasPrefix(p, "/v1/") && !strings.HasPrefix(p, "/v1/client/") && !strings.HasPrefix(p, "/v1/agent/") &&
		!strings.HasPrefix(p, "/v1/operator/")
}
