package sidecar

import (
	"context"
	"crypto/tls"
	"maps"
	"net"
	"sync"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
)

// reauthInterval is how often open, authorized connections are checked
// again. Consul never re-authorizes open connections (#6454), so a deny
// intention only stops new ones; meshlet's built-in proxy re-asks the
// authorization service for every (source, destination) pair it has open
// connections for, and closes those connections once the answer is deny.
// One Check per identity pair and interval, however many connections (a
// local call to the node's own agent); 500 ms keeps a deny within 1 s
// of the change reaching the destination's agent.
//
// A pair whose last allow was marked with the authorization epoch the
// control plane sent last (authzcache.go) is not asked again while that
// epoch lasts, up to reauthMaxAge: nothing it was decided on has changed.
// A new epoch re-checks every pair at once instead of at the next tick.
const (
	reauthInterval = 500 * time.Millisecond
	reauthMaxAge   = 30 * time.Second
)

// liveConns are the authorized connections of one identity pair on one
// listener (its stats and timeout).
type liveConns struct {
	// conns map each connection to what else closing it ends (nil:
	// nothing; a TCP relay's upstream side).
	conns   map[net.Conn]func()
	timeout time.Duration
	stats   *authzStats
	// attrs are the attributes of the last connection admitted: a re-check
	// asks what that connection's check asked (an authorization service
	// may decide on addresses as well as identities).
	attrs *authv3.AttributeContext
	// epoch is the authorization epoch the pair's last allow was marked
	// with ("" none, or not the current one then), checked when it was.
	epoch   string
	checked time.Time
}

// pairKey names the connections re-checked together: one identity pair
// on one listener.
type pairKey struct {
	src, dst string
	stats    *authzStats
}

// openConns tracks authorized connections by identity pair and listener.
type openConns struct {
	mu    sync.Mutex
	pairs map[pairKey]*liveConns
}

// peerURI is the URI SAN of a TLS connection's client certificate, or "".
func peerURI(down net.Conn) string {
	if tc, ok := down.(*tls.Conn); ok {
		if certs := tc.ConnectionState().PeerCertificates; len(certs) > 0 && len(certs[0].URIs) > 0 {
			return certs[0].URIs[0].String()
		}
	}
	return ""
}

// checkAttributes are the attributes of a connection's check.
func checkAttributes(down net.Conn, srcURI, ourURI string) *authv3.AttributeContext {
	return &authv3.AttributeContext{
		Source:      &authv3.AttributeContext_Peer{Address: socketAddress(down.RemoteAddr()), Principal: srcURI},
		Destination: &authv3.AttributeContext_Peer{Address: socketAddress(down.LocalAddr()), Principal: ourURI},
	}
}

// track registers an authorized connection until the returned func is
// called; closing it on a deny also calls also (if set). A connection
// without a client identity is not re-checked: intentions are between
// identities, and Envoy never re-checks at all.
func (a *authorizer) track(down net.Conn, ourURI string, cfg *authzConfig, st *authzStats, also func()) func() {
	src := peerURI(down)
	if src == "" {
		return func() {}
	}
	key := pairKey{src: src, dst: ourURI, stats: st}
	attrs := checkAttributes(down, src, ourURI)
	o := &a.open
	o.mu.Lock()
	if o.pairs == nil {
		o.pairs = map[pairKey]*liveConns{}
	}
	lc := o.pairs[key]
	if lc == nil {
		lc = &liveConns{conns: map[net.Conn]func(){}, stats: st}
		o.pairs[key] = lc
	}
	lc.conns[down] = also
	lc.timeout, lc.attrs = cfg.timeout, attrs
	lc.epoch, lc.checked = a.cache.allowedIn([2]string{src, ourURI}), time.Now()
	o.mu.Unlock()
	return func() {
		o.mu.Lock()
		delete(lc.conns, down)
		if len(lc.conns) == 0 && o.pairs[key] == lc {
			delete(o.pairs, key)
		}
		o.mu.Unlock()
	}
}

// reauthorizeLoop re-checks open connections every interval until ctx ends.
func (a *authorizer) reauthorizeLoop(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-a.epochMoved:
		}
		a.reauthorize(ctx)
	}
}

// setEpoch makes e the current authorization epoch; a change drops the
// cached allows and has the open connections re-checked at once.
func (a *authorizer) setEpoch(e string) {
	if a.cache.setEpoch(e) && e != "" {
		select {
		case a.epochMoved <- struct{}{}:
		default: // a re-check is already due
		}
	}
}

// reauthorize asks once per identity pair and listener and closes the
// pair's connections on a deny; a pair allowed in the current epoch less
// than reauthMaxAge ago, whose allow is still cached, is skipped. A failed
// call keeps them (fail-static).
func (a *authorizer) reauthorize(ctx context.Context) {
	type pending struct {
		key     pairKey
		lc      *liveConns
		attrs   *authv3.AttributeContext
		timeout time.Duration
	}
	now, cur := time.Now(), a.cache.current()
	a.open.mu.Lock()
	pairs := make([]pending, 0, len(a.open.pairs))
	for k, v := range a.open.pairs {
		// Skipped only while the cache still holds the pair's allow: a
		// new connection of the pair denied meanwhile dropped it.
		if cur != "" && v.epoch == cur && now.Sub(v.checked) < reauthMaxAge &&
			a.cache.allowedIn([2]string{k.src, k.dst}) == cur {
			continue
		}
		pairs = append(pairs, pending{k, v, v.attrs, v.timeout})
	}
	a.open.mu.Unlock()
	for _, p := range pairs {
		key := [2]string{p.key.src, p.key.dst}
		if !a.stillAllowed(ctx, key, p.attrs, p.timeout) {
			a.closePair(p.key, p.lc)
			continue
		}
		a.open.mu.Lock()
		p.lc.epoch, p.lc.checked = a.cache.allowedIn(key), now
		a.open.mu.Unlock()
	}
}

// stillAllowed asks again for an open pair. An allow marked with the
// current epoch is cached (see allowedIn); an error keeps the pair.
func (a *authorizer) stillAllowed(ctx context.Context, key [2]string, attrs *authv3.AttributeContext, timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if a.token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-consul-token", a.token)
	}
	resp, err := a.client.Check(ctx, &authv3.CheckRequest{Attributes: attrs})
	if err != nil {
		return true
	}
	allowed := resp.GetStatus().GetCode() == int32(codes.OK)
	a.mu.Lock()
	a.last[key] = allowed
	a.mu.Unlock()
	if allowed {
		a.cache.put(key, responseEpoch(resp))
	} else {
		a.cache.drop(key)
	}
	return allowed
}

func (a *authorizer) closePair(key pairKey, lc *liveConns) {
	a.open.mu.Lock()
	conns := maps.Clone(lc.conns)
	a.open.mu.Unlock()
	for c, also := range conns {
		// Close the transport, not the TLS layer: a TLS close_notify could
		// wait behind a write blocked on a slow peer.
		if tc, ok := c.(*tls.Conn); ok {
			c = tc.NetConn()
		}
		_ = c.Close()
		if also != nil {
			also()
		}
		lc.stats.reauthClosed.Add(1)
	}
	if len(conns) > 0 {
		a.log.Info("closed connections no longer authorized", "source", key.src, "destination", key.dst, "connections", len(conns))
	}
}
