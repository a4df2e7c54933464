package xds

import (
	"fmt"
	"sort"
)

// ProxyStatus is what the server knows about one proxy.
type ProxyStatus struct {
	// Connected is true while an xDS stream of this node is open.
	Connected bool
	// ConfigError is set when the proxy's registration cannot be compiled
	// (wraps ErrInvalidProxyConfig or ErrInconsistent); the proxy keeps its
	// last good resources, if any.
	ConfigError error
	// Rejected maps a type URL to the error detail of the proxy's last NACK,
	// cleared by its next ACK of that type.
	Rejected map[string]string
}

type proxyStatus struct {
	configErr  error
	rejected   map[string]string
	loggedNack map[string]string // type -> detail last logged (log once)
}

// ProxyStatus reports a proxy's compile errors and rejections.
func (s *Server) ProxyStatus(proxyID string) ProxyStatus {
	out := ProxyStatus{Connected: s.tracker.connected(proxyID), Rejected: map[string]string{}}
	s.statusMu.Lock()
	defer s.statusMu.Unlock()
	if st := s.status[proxyID]; st != nil {
		out.ConfigError = st.configErr
		for k, v := range st.rejected {
			out.Rejected[k] = v
		}
	}
	return out
}

// ProxyError is nil while the proxy's config compiles and is accepted;
// otherwise a one-line error the agent can fail the allocation with.
func (s *Server) ProxyError(proxyID string) error {
	st := s.ProxyStatus(proxyID)
	if st.ConfigError != nil {
		return fmt.Errorf("proxy %q: %w", proxyID, st.ConfigError)
	}
	if len(st.Rejected) > 0 {
		types := make([]string, 0, len(st.Rejected))
		for t := range st.Rejected {
			types = append(types, t)
		}
		sort.Strings(types)
		return fmt.Errorf("proxy %q: %w: %s: %s", proxyID, ErrRejected, typeLabel(types[0]), st.Rejected[types[0]])
	}
	return nil
}

func (s *Server) statusOf(proxyID string) *proxyStatus {
	st := s.status[proxyID]
	if st == nil {
		st = &proxyStatus{rejected: map[string]string{}, loggedNack: map[string]string{}}
		s.status[proxyID] = st
	}
	return st
}

// setConfigError records (err != nil) or clears a proxy's compile error,
// logging it once per distinct message.
func (s *Server) setConfigError(proxyID string, err error) {
	s.statusMu.Lock()
	defer s.statusMu.Unlock()
	if err == nil {
		if st := s.status[proxyID]; st != nil {
			st.configErr = nil
		}
		return
	}
	st := s.statusOf(proxyID)
	if st.configErr == nil || st.configErr.Error() != err.Error() {
		s.log.Warn("proxy config rejected; keeping its last good resources", "proxy_id", proxyID, "error", err)
	}
	st.configErr = err
}

// recordNack notes a rejection; it is logged once per distinct detail.
func (s *Server) recordNack(proxyID, typeURL string, version uint64, detail string) {
	s.statusMu.Lock()
	defer s.statusMu.Unlock()
	st := s.statusOf(proxyID)
	st.rejected[typeURL] = detail
	if st.loggedNack[typeURL] != detail {
		st.loggedNack[typeURL] = detail
		s.log.Warn("proxy rejected configuration; holding it at its last accepted version until the input changes",
			"proxy_id", proxyID, "type", typeLabel(typeURL), "version", version, "error", detail)
	}
}

// recordAck clears a type's rejection.
func (s *Server) recordAck(proxyID, typeURL string) {
	s.statusMu.Lock()
	defer s.statusMu.Unlock()
	if st := s.status[proxyID]; st != nil {
		delete(st.rejected, typeURL)
		delete(st.loggedNack, typeURL)
	}
}

// forget drops a proxy's status (it left the catalog).
func (s *Server) forget(proxyID string) {
	s.statusMu.Lock()
	defer s.statusMu.Unlock()
	delete(s.status, proxyID)
}
