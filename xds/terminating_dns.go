package xds

import (
	"fmt"
	"strings"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/proto"

	"github.com/meshlet/meshlet/internal/lazyre"
)

// hostnameRE is a DNS host name (no wildcard, no port).
var hostnameRE = lazyre.New(`^([A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.)*[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?\.?$`)

func validHostname(h string) bool { return len(h) <= 253 && hostnameRE.MatchString(h) }

// parseDNSDiscoveryType reads envoy_dns_discovery_type: how a gateway
// resolves services registered by hostname, LOGICAL_DNS (Consul's
// default) or STRICT_DNS.
func parseDNSDiscoveryType(cfg map[string]any) (cluster.Cluster_DiscoveryType, error) {
	s, err := parseString(cfg, CfgDNSDiscoveryType)
	if err != nil {
		return 0, err
	}
	switch strings.ToUpper(strings.TrimSpace(s)) {
	case "", "LOGICAL_DNS":
		return cluster.Cluster_LOGICAL_DNS, nil
	case "STRICT_DNS":
		return cluster.Cluster_STRICT_DNS, nil
	}
	return 0, fmt.Errorf("%w: %s %q is not STRICT_DNS or LOGICAL_DNS", ErrInvalidProxyConfig, CfgDNSDiscoveryType, s)
}

func cloneChains(in []*listener.FilterChain) []*listener.FilterChain {
	out := make([]*listener.FilterChain, len(in))
	for i, fc := range in {
		out[i] = proto.Clone(fc).(*listener.FilterChain)
	}
	return out
}
