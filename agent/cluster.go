package agent

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"

	"github.com/meshlet/meshlet/client"
	"github.com/meshlet/meshlet/internal/atomicfile"
	"github.com/meshlet/meshlet/internal/etcdembed"
	"github.com/meshlet/meshlet/internal/tlsutil"
	"github.com/meshlet/meshlet/rpc"
	"github.com/meshlet/meshlet/server"
)

var _ rpc.Backend = (*server.RPCBackend)(nil)

// joinTimeout bounds a new server's wait for a running one to add it.
const joinTimeout = 2 * time.Minute

// tlsConfig is the RPC port's mutual TLS (nil when tls.rpc is off).
func (a *Agent) tlsConfig() *tlsutil.Config {
	t := a.cfg.TLS
	if !t.RPC {
		return nil
	}
	return &tlsutil.Config{CAFile: t.CAFile, CertFile: t.CertFile, KeyFile: t.KeyFile,
		VerifyServerHostname: t.VerifyServerHostname, Region: a.cfg.Region}
}

// rpcTLS returns the listener and dialer TLS configurations (nil, nil
// without tls.rpc).
func (a *Agent) rpcTLS() (srv, dial *tls.Config, err error) {
	tc := a.tlsConfig()
	if tc == nil {
		return nil, nil, nil
	}
	if err := tc.Validate(); err != nil {
		return nil, nil, fmt.Errorf("tls: %w", err)
	}
	if srv, err = tc.ServerTLS(); err != nil {
		return nil, nil, fmt.Errorf("tls: %w", err)
	}
	if dial, err = tc.ClientTLS(); err != nil {
		return nil, nil, fmt.Errorf("tls: %w", err)
	}
	return srv, dial, nil
}

// listenRPC opens the RPC port of a server agent (before the server
// starts: its address is the leader election's value).
func (a *Agent) listenRPC() error {
	addr := net.JoinHostPort(a.cfg.BindAddr, strconv.Itoa(a.cfg.Ports.RPC))
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("failed to listen on %s (ports.rpc): %w", addr, err)
	}
	a.rpcLn = ln
	if a.cfg.TLS.RPC {
		return nil
	}
	a.logger.Warn("the RPC port has no TLS: any host that reaches it can act as a client node; configure the tls block (see docs/security.md)",
		"address", ln.Addr().String())
	return nil
}

// RPCAddr is the server's RPC address ("" without the server role).
func (a *Agent) RPCAddr() string {
	if a.rpcLn == nil {
		return ""
	}
	return a.rpcLn.Addr().String()
}

// serveRPC serves client nodes, other servers' joins and forwarded API
// requests on the RPC port.
func (a *Agent) serveRPC() error {
	srvTLS, dialTLS, err := a.rpcTLS()
	if err != nil {
		return err
	}
	cfg := rpc.ServerConfig{Backend: a.server.RPCBackend(), TLS: srvTLS, DialTLS: dialTLS,
		Logger: a.logger, API: a.apiSrv.Handler(),
		Connect: connectBackend{Store: a.mesh.store, ca: a.controlPlane.CA}}
	if st := a.aclStore(); st != nil {
		cfg.ACL = st
	}
	if a.acl != nil && a.acl.minter != nil {
		cfg.WorkloadTokens = a.acl.minter
	}
	if a.acl != nil {
		cfg.Tokens = a.acl.resolver
	}
	if a.etcdMember != nil {
		// One join at a time: etcd takes one learner at a time, and a
		// second join waits for the first member's promotion.
		var joinMu sync.Mutex
		cfg.Join = func(ctx context.Context, name, peerURL string) (string, error) {
			joinMu.Lock()
			defer joinMu.Unlock()
			return etcdembed.AddMember(ctx, a.etcdMember.Client(), name, peerURL)
		}
	}
	rs, err := rpc.NewServer(cfg)
	if err != nil {
		return err
	}
	a.rpcSrv = rs
	ln := a.rpcLn
	go func() {
		if err := rs.Serve(ln); err != nil {
			a.logger.Error("RPC server stopped", "error", err)
		}
	}()
	return nil
}

// serverConn is how the client role reaches the servers: in process on a
// server agent, over the RPC port otherwise.
func (a *Agent) serverConn() (client.ServerConn, error) {
	if a.server != nil {
		return a.server, nil
	}
	if a.rpcClient != nil {
		return a.rpcClient, nil
	}
	_, dialTLS, err := a.rpcTLS()
	if err != nil {
		return nil, err
	}
	rc, err := rpc.NewClient(rpc.ClientConfig{Servers: a.cfg.Cluster.Servers, TLS: dialTLS, Logger: a.logger})
	if err != nil {
		return nil, err
	}
	a.rpcClient = rc
	return rc, nil
}

// serverID is this server's persistent identity (server/server-id).
func serverID(dataDir string) (string, error) {
	path := filepath.Join(dataDir, "server", "server-id")
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	} else if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("failed to read server ID: %w", err)
	}
	id := uuid.NewString()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return "", err
	}
	if err := atomicfile.WriteFile(path, []byte(id+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("failed to write server ID: %w", err)
	}
	return id, nil
}

// joinCluster asks a running server (retry_join) to add this server's
// etcd member and returns the cluster to start it with; "" when this
// server starts the cluster or its member already exists.
func (a *Agent) joinCluster(ctx context.Context, name, peerURL string) (string, error) {
	if len(a.cfg.Cluster.RetryJoin) == 0 {
		return "", nil
	}
	if _, err := os.Stat(filepath.Join(etcdDir(a.cfg.DataDir), "member")); err == nil {
		return "", nil // a restart: the member knows its cluster
	}
	_, dialTLS, err := a.rpcTLS()
	if err != nil {
		return "", err
	}
	ctx, cancel := context.WithTimeout(ctx, joinTimeout)
	defer cancel()
	for {
		resp, err := rpc.Join(ctx, a.cfg.Cluster.RetryJoin, dialTLS, rpc.JoinRequest{Name: name, PeerURL: peerURL}, joinTimeout)
		if err == nil {
			a.logger.Info("joined the cluster", "via", strings.Join(a.cfg.Cluster.RetryJoin, ","))
			return resp.InitialCluster, nil
		}
		a.logger.Warn("failed to join the cluster; retrying", "via", strings.Join(a.cfg.Cluster.RetryJoin, ","), "error", err)
		select {
		case <-ctx.Done():
			return "", fmt.Errorf("failed to join the cluster through %s: %w", strings.Join(a.cfg.Cluster.RetryJoin, ","), err)
		case <-time.After(2 * time.Second):
		}
	}
}

// forwardToServers is a client-only agent's API handler: its own routes
// (task logs, exec, agent info, metrics) are served here, everything else
// goes to a server over the RPC port (mutual TLS when configured).
func (a *Agent) forwardToServers(local http.Handler) (http.Handler, error) {
	_, dialTLS, err := a.rpcTLS()
	if err != nil {
		return nil, err
	}
	scheme := "http"
	tr := &http.Transport{TLSClientConfig: dialTLS}
	if dialTLS != nil {
		scheme = "https"
		tr.ForceAttemptHTTP2 = true
	}
	servers := a.cfg.Cluster.Servers
	var next atomic.Uint64
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			target := &url.URL{Scheme: scheme, Host: servers[next.Load()%uint64(len(servers))]}
			pr.SetURL(target)
			pr.Out.Host = target.Host
		},
		Transport: tr,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			next.Add(1) // the next request tries another server
			http.Error(w, "failed to reach a server: "+err.Error(), http.StatusBadGateway)
		},
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if clientLocal(r.URL.Path) {
			local.ServeHTTP(w, r)
			return
		}
		proxy.ServeHTTP(w, r)
	}), nil
}

// clientLocal reports whether a client-only agent answers path itself.
func clientLocal(path string) bool {
	for _, p := range []string{"/v1/client/", "/v1/agent/self", "/v1/metrics"} {
		if strings.HasPrefix(path, p) {
			return true
		}
	}
	return false
}
