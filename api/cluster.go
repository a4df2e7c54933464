package api

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
)

// ServerMember is one server of the cluster, as `server members` shows it.
type ServerMember struct {
	Name       string
	Addr       string // RPC host
	Port       int    // RPC port
	Status     string // "alive", "failed"
	Leader     bool
	EtcdRole   string // the member's etcd role: leader, follower, learner, external
	Datacenter string
	Region     string
	Build      string
}

// ClusterBackend is what a server agent knows of its cluster; a Backend
// without it is a one-server cluster reported from AgentInfo.
type ClusterBackend interface {
	// Leader is the leader's RPC address ("" during an election).
	Leader(ctx context.Context) (string, error)
	Members(ctx context.Context) ([]ServerMember, error)
	// ForceLeave removes a dead server's etcd member by name.
	ForceLeave(ctx context.Context, name string) error
}

func (s *Server) clusterRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/agent/members", s.read(s.agentMembers))
	mux.HandleFunc("PUT /v1/agent/force-leave", s.write(s.forceLeave))
	mux.HandleFunc("POST /v1/agent/force-leave", s.write(s.forceLeave))
}

func (s *Server) cluster() (ClusterBackend, bool) {
	cb, ok := s.b.(ClusterBackend)
	return cb, ok
}

func (s *Server) statusLeader(r *http.Request) (any, error) {
	if cb, ok := s.cluster(); ok {
		return cb.Leader(r.Context())
	}
	return s.info.RPCAddr, nil
}

func (s *Server) statusPeers(r *http.Request) (any, error) {
	cb, ok := s.cluster()
	if !ok {
		return []string{s.info.RPCAddr}, nil
	}
	members, err := cb.Members(r.Context())
	if err != nil {
		return nil, err
	}
	out := []string{}
	for _, m := range members {
		if m.Status == "alive" && m.Port > 0 {
			out = append(out, fmt.Sprintf("%s:%d", m.Addr, m.Port))
		}
	}
	return out, nil
}

// agentMembers answers /v1/agent/members in nomad/api's ServerMembers
// shape.
func (s *Server) agentMembers(r *http.Request) (any, error) {
	var members []ServerMember
	if cb, ok := s.cluster(); ok {
		var err error
		if members, err = cb.Members(r.Context()); err != nil {
			return nil, err
		}
	} else {
		members = []ServerMember{{Name: s.info.NodeName, Addr: hostOnly(s.info.RPCAddr), Status: "alive", Leader: true,
			EtcdRole: "leader", Datacenter: s.info.Datacenter, Region: s.info.Region, Build: s.info.Version}}
	}
	out := make([]map[string]any, 0, len(members))
	for _, m := range members {
		out = append(out, map[string]any{
			"Name": m.Name + "." + m.Region, "Addr": m.Addr, "Port": m.Port, "Status": m.Status,
			"Tags": map[string]string{"role": "nomad", "region": m.Region, "dc": m.Datacenter, "build": m.Build,
				"port": strconv.Itoa(m.Port), "leader": strconv.FormatBool(m.Leader), "etcd_role": m.EtcdRole},
		})
	}
	return map[string]any{"ServerName": s.info.NodeName, "ServerRegion": s.info.Region, "ServerDC": s.info.Datacenter,
		"Members": out}, nil
}

func (s *Server) forceLeave(r *http.Request) (any, uint64, error) {
	name := r.URL.Query().Get("node")
	if name == "" {
		return nil, 0, fmt.Errorf("%w: force-leave needs ?node=NAME", ErrInvalid)
	}
	cb, ok := s.cluster()
	if !ok {
		return nil, 0, fmt.Errorf("%w: this agent runs a one-server cluster", ErrInvalid)
	}
	if err := cb.ForceLeave(r.Context(), name); err != nil {
		return nil, 0, err
	}
	return struct{}{}, 0, nil
}
