package api

import (
	"net"
	"net/http"
	"strconv"
)

func (s *Server) agentRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/agent/self", s.read(s.agentSelf))
	mux.HandleFunc("GET /v1/agent/health", s.read(s.agentHealth))
	mux.HandleFunc("GET /v1/status/leader", s.read(s.statusLeader))
	mux.HandleFunc("GET /v1/status/peers", s.read(s.statusPeers))
	mux.HandleFunc("GET /v1/regions", s.read(s.regions))
	mux.HandleFunc("GET /v1/metrics", s.handleMetrics)
	s.clusterRoutes(mux)
}

// agentSelf answers /v1/agent/self in the shape nomad/api's AgentSelf
// decodes (config, member, stats), with what meshlet knows.
func (s *Server) agentSelf(*http.Request) (any, error) {
	host, portStr, err := net.SplitHostPort(s.info.RPCAddr)
	if err != nil {
		host, portStr = s.info.RPCAddr, "0"
	}
	port, _ := strconv.Atoi(portStr)
	return map[string]any{
		"config": map[string]any{
			"Region":     s.info.Region,
			"Datacenter": s.info.Datacenter,
			"NodeName":   s.info.NodeName,
			"Version":    map[string]any{"Version": s.info.Version},
			"Server":     map[string]any{"Enabled": true},
			"Client":     map[string]any{"Enabled": true},
		},
		"member": map[string]any{
			"Name":   s.info.NodeName + "." + s.info.Region,
			"Addr":   host,
			"Port":   port,
			"Status": "alive",
			"Tags": map[string]string{
				"region": s.info.Region,
				"dc":     s.info.Datacenter,
				"role":   "nomad",
				"build":  s.info.Version,
			},
		},
		"stats": map[string]map[string]string{
			"nomad": {"leader": "true", "server": "true"},
		},
	}, nil
}

func (s *Server) agentHealth(*http.Request) (any, error) {
	ok := map[string]any{"ok": true, "message": "ok"}
	return map[string]any{"client": ok, "server": ok}, nil
}

func (s *Server) regions(*http.Request) (any, error) { return []string{s.info.Region}, nil }

func (s *Server) handleMetrics(w http.ResponseWriter, r *http.Request) {
	if s.metrics == nil {
		http.Error(w, "metrics are not enabled on this agent", http.StatusNotFound)
		return
	}
	s.metrics.ServeHTTP(w, r)
}
