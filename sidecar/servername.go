package sidecar

import (
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
)

// buildServerNameState prepares a listener whose filter chain is chosen
// by the TLS server name: a state per chain (what its connections use
// once the handshake picked it), and a TLS config that hands each client
// hello to its chain's, refusing a name no chain matches.
func (p *Proxy) buildServerNameState(cfg *listenerConfig) *listenerState {
	st := &listenerState{cfg: cfg, byServerName: map[string]*listenerState{}}
	built := map[*filterChain]*listenerState{}
	for name, ch := range cfg.byServerName {
		sub := built[ch]
		if sub == nil {
			sub = p.buildListenerState(&listenerConfig{name: cfg.name, addr: cfg.addr, chain: ch})
			built[ch] = sub
		}
		st.byServerName[name] = sub
	}
	if cfg.passthrough {
		return st // no TLS here: the server name is peeked (passthrough.go)
	}
	st.tlsConf = &tls.Config{
		MinVersion: tls.VersionTLS12,
		GetConfigForClient: func(hello *tls.ClientHelloInfo) (*tls.Config, error) {
			if sub := st.byServerName[strings.ToLower(hello.ServerName)]; sub != nil {
				return sub.tlsConf, nil
			}
			return nil, fmt.Errorf("%w: %q", errNoServerName, hello.ServerName)
		},
	}
	return st
}

// errNoServerName: a client hello named no server a filter chain matches.
var errNoServerName = errors.New("no filter chain matches the server name")
