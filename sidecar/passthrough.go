package sidecar

import (
	"bytes"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
)

// SNI passthrough: a listener whose server_names chains have no transport
// socket (a mesh gateway's) picks the chain by the server name of the
// client hello it peeks at, then relays the connection's bytes, the hello
// included, untouched: the TLS stays between the two ends.

// maxClientHello bounds what is read while looking for the server name.
const maxClientHello = 64 << 10

var (
	// errNotClientHello: the first bytes are not a TLS client hello.
	errNotClientHello = errors.New("not a TLS client hello")
	// errPeeked stops the handshake once the hello has been read.
	errPeeked = errors.New("client hello peeked")
)

// checkPassthroughChains decides whether server_names chains pass TLS
// through: all of them have no transport socket (then each must be a
// plain tcp_proxy) or all have one (terminated, as a terminating
// gateway's). Wildcard names ("*.example.com") are allowed only when
// passing through.
func checkPassthroughChains(fcs []*listenerv3.FilterChain, chains []*filterChain) (bool, error) {
	plain := 0
	for _, ch := range chains {
		if ch.tls == nil {
			plain++
		}
	}
	switch {
	case plain == 0:
		for i, fc := range fcs {
			for _, n := range fc.GetFilterChainMatch().GetServerNames() {
				if strings.HasPrefix(n, "*") {
					return false, fmt.Errorf("filter_chains[%d]: wildcard server name %q is not supported on a chain that terminates TLS", i, n)
				}
			}
		}
		return false, nil
	case plain != len(chains):
		return false, errors.New("server_names chains must all terminate TLS or all pass it through")
	}
	for i, ch := range chains {
		if ch.tcp == nil || ch.authz != nil {
			return false, fmt.Errorf("filter_chains[%d]: a chain that passes TLS through must be a tcp_proxy alone", i)
		}
		for _, n := range fcs[i].GetFilterChainMatch().GetServerNames() {
			if strings.HasPrefix(n, "*") && (!strings.HasPrefix(n, "*.") || strings.Contains(n[2:], "*") || len(n) < 3) {
				return false, fmt.Errorf("filter_chains[%d]: server name %q: only a leading \"*.\" wildcard is supported", i, n)
			}
		}
	}
	return true, nil
}

// lookupServerName is the chain state for name: an exact match, else the
// longest "*.<suffix>" wildcard that matches (as Envoy picks).
func (st *listenerState) lookupServerName(name string) *listenerState {
	name = strings.ToLower(name)
	if sub := st.byServerName[name]; sub != nil {
		return sub
	}
	for rest := name; ; {
		i := strings.IndexByte(rest, '.')
		if i < 0 {
			return nil
		}
		rest = rest[i+1:]
		if sub := st.byServerName["*."+rest]; sub != nil {
			return sub
		}
	}
}

// passthrough serves one connection of a passthrough listener: peek the
// server name, pick its chain, relay the raw bytes to the chain's cluster.
func (l *listener) passthrough(c net.Conn, st *listenerState) {
	_ = c.SetReadDeadline(time.Now().Add(handshakeTimeout))
	name, peeked, err := peekServerName(c)
	_ = c.SetReadDeadline(time.Time{})
	if err != nil {
		l.stats.sslError.Add(1)
		l.log.Debug("no server name to route by", "remote", c.RemoteAddr().String(), "error", err)
		return
	}
	cs := st.lookupServerName(name)
	if cs == nil {
		l.stats.noFilterChain.Add(1)
		l.log.Debug("no filter chain matches the server name", "remote", c.RemoteAddr().String(), "server_name", name)
		return
	}
	down := &peekedConn{Conn: c, r: io.MultiReader(bytes.NewReader(peeked), c)}
	ctx, cancel := l.relayContext(st, c)
	defer cancel()
	l.p.proxyTCP(ctx, cs.cfg.chain.tcp, cs.tcpStats, down)
}

// peekServerName reads c's TLS client hello and returns its server name
// and every byte read (to be replayed upstream). crypto/tls parses the
// hello; the handshake stops before anything is written back.
func peekServerName(c net.Conn) (string, []byte, error) {
	var buf bytes.Buffer
	rec := &recordingConn{Conn: c, r: io.TeeReader(io.LimitReader(c, maxClientHello), &buf)}
	var name string
	seen := false
	err := tls.Server(rec, &tls.Config{
		MinVersion: tls.VersionTLS10,
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			name, seen = hello.ServerName, true
			return nil, errPeeked
		},
	}).Handshake()
	if !seen {
		return "", nil, fmt.Errorf("%w: %w", errNotClientHello, err)
	}
	return name, buf.Bytes(), nil
}

// recordingConn is a connection crypto/tls reads a client hello from
// (through r) and can write nothing to (no alert reaches the client: the
// connection is relayed, not answered).
type recordingConn struct {
	net.Conn
	r io.Reader
}

func (c *recordingConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *recordingConn) Write(p []byte) (int, error) { return 0, io.ErrClosedPipe }
func (c *recordingConn) Close() error                { return nil }

// peekedConn replays the peeked bytes before reading the connection on.
type peekedConn struct {
	net.Conn
	r io.Reader
}

func (c *peekedConn) Read(p []byte) (int, error) { return c.r.Read(p) }

// CloseWrite half-closes the underlying connection (the relay propagates
// half-closes).
func (c *peekedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
