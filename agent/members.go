package agent

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"strconv"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/internal/etcdembed"
	"github.com/meshlet/meshlet/server"
)

var _ api.ClusterBackend = (*Backend)(nil)

// memberView is a server agent's view of the cluster's servers: the live
// ones from the leader election, their etcd roles from the membership.
type memberView struct {
	lead   *server.EtcdLeadership
	member *etcdembed.Member // nil with an external etcd
	dc     string
	region string
}

func (a *Agent) memberView() *memberView {
	if a.lead == nil {
		return nil
	}
	return &memberView{lead: a.lead, member: a.etcdMember, dc: a.cfg.Datacenter, region: a.cfg.Region}
}

// Leader implements api.ClusterBackend.
func (b *Backend) Leader(ctx context.Context) (string, error) {
	if b.members == nil {
		return "", nil
	}
	return b.members.lead.Leader(ctx)
}

// Members implements api.ClusterBackend: every etcd member (a server
// whose process is gone shows as failed) and, with an external etcd,
// every live server.
func (b *Backend) Members(ctx context.Context) ([]api.ServerMember, error) {
	if b.members == nil {
		return nil, nil
	}
	cands, err := b.members.lead.Candidates(ctx)
	if err != nil {
		return nil, fmt.Errorf("failed to list servers: %w", err)
	}
	byName := map[string]server.Candidate{}
	for _, c := range cands {
		byName[c.Name] = c
	}
	mk := func(name, etcdRole string, c server.Candidate, alive bool) api.ServerMember {
		m := api.ServerMember{Name: name, EtcdRole: etcdRole, Status: "failed", Datacenter: b.members.dc,
			Region: b.members.region, Build: Version, Leader: c.Leader}
		if alive {
			m.Status = "alive"
		}
		if host, port, err := net.SplitHostPort(c.Addr); err == nil {
			m.Addr = host
			m.Port, _ = strconv.Atoi(port)
		}
		return m
	}
	if b.members.member == nil {
		out := make([]api.ServerMember, 0, len(cands))
		for _, c := range cands {
			out = append(out, mk(c.Name, "external", c, true))
		}
		return out, nil
	}
	ms, err := etcdembed.Members(ctx, b.members.member.Client())
	if err != nil {
		return nil, fmt.Errorf("failed to list etcd members: %w", err)
	}
	out := make([]api.ServerMember, 0, len(ms))
	for _, em := range ms {
		c, alive := byName[em.Name]
		m := mk(em.Name, etcdRole(em), c, alive)
		if m.Addr == "" && len(em.PeerURLs) > 0 {
			if u, err := url.Parse(em.PeerURLs[0]); err == nil {
				m.Addr = u.Hostname()
			}
		}
		out = append(out, m)
	}
	return out, nil
}

func etcdRole(m etcdembed.MemberInfo) string {
	switch {
	case m.IsLearner:
		return "learner"
	case m.IsLeader:
		return "leader"
	}
	return "follower"
}

// ForceLeave implements api.ClusterBackend.
func (b *Backend) ForceLeave(ctx context.Context, name string) error {
	if b.members == nil || b.members.member == nil {
		return &apiError{fmt.Errorf("force-leave needs the embedded etcd member (this server uses an external etcd: remove members there)"), api.ErrInvalid}
	}
	if err := etcdembed.RemoveMember(ctx, b.members.member.Client(), name); err != nil {
		return mapErr(err)
	}
	return nil
}
