package sidecar

import (
	"fmt"
	"sort"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

// configDump builds Envoy's ConfigDump: bootstrap, clusters, endpoints,
// listeners, routes and secrets (private keys redacted).
func (p *Proxy) configDump() (*adminv3.ConfigDump, error) {
	dumps := []proto.Message{p.bootstrapDump(), p.clustersDump(), p.endpointsDump(), p.listenersDump(), p.routesDump()}
	sd, err := p.secretsDump()
	if err != nil {
		return nil, err
	}
	dumps = append(dumps, sd)
	out := &adminv3.ConfigDump{}
	for _, d := range dumps {
		a, err := anypb.New(d)
		if err != nil {
			return nil, fmt.Errorf("failed to pack %T: %w", d, err)
		}
		out.Configs = append(out.Configs, a)
	}
	return out, nil
}

func (p *Proxy) bootstrapDump() *adminv3.BootstrapConfigDump {
	host, port := splitAddr(p.AdminAddr())
	return &adminv3.BootstrapConfigDump{Bootstrap: &bootstrapv3.Bootstrap{
		Node: p.node,
		Admin: &bootstrapv3.Admin{Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
			Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: port},
		}}}},
	}}
}

func splitAddr(addr string) (string, uint32) {
	a := socketAddress(addrString(addr))
	if a == nil {
		return "", 0
	}
	sa := a.GetSocketAddress()
	return sa.GetAddress(), sa.GetPortValue()
}

type addrString string

func (a addrString) Network() string { return "tcp" }
func (a addrString) String() string  { return string(a) }

// sortedEntries returns a type's entries ordered by name.
func sortedEntries(m map[string]*entry) []*entry {
	out := make([]*entry, 0, len(m))
	for _, e := range m {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

func mustAny(m proto.Message) *anypb.Any {
	a, err := anypb.New(m)
	if err != nil {
		return nil // only for messages of known types; cannot fail
	}
	return a
}

func (p *Proxy) clustersDump() *adminv3.ClustersConfigDump {
	version, _ := p.store.accepted(typeCluster)
	d := &adminv3.ClustersConfigDump{VersionInfo: version}
	active := p.clusters.all()
	for _, e := range sortedEntries(p.store.get(typeCluster)) {
		dc := &adminv3.ClustersConfigDump_DynamicCluster{VersionInfo: e.version, Cluster: mustAny(e.raw), LastUpdated: timestamppb.New(e.updated)}
		if c := active[e.name]; c != nil && c.applied.Load() == e {
			d.DynamicActiveClusters = append(d.DynamicActiveClusters, dc)
		} else {
			d.DynamicWarmingClusters = append(d.DynamicWarmingClusters, dc)
		}
	}
	return d
}

func (p *Proxy) endpointsDump() *adminv3.EndpointsConfigDump {
	d := &adminv3.EndpointsConfigDump{}
	for _, e := range sortedEntries(p.store.get(typeEndpoint)) {
		d.DynamicEndpointConfigs = append(d.DynamicEndpointConfigs, &adminv3.EndpointsConfigDump_DynamicEndpointConfig{
			VersionInfo: e.version, EndpointConfig: mustAny(e.raw), LastUpdated: timestamppb.New(e.updated),
		})
	}
	return d
}

func (p *Proxy) listenersDump() *adminv3.ListenersConfigDump {
	version, _ := p.store.accepted(typeListener)
	d := &adminv3.ListenersConfigDump{VersionInfo: version}
	active := p.listeners.active()
	state := func(e *entry) *adminv3.ListenersConfigDump_DynamicListenerState {
		return &adminv3.ListenersConfigDump_DynamicListenerState{VersionInfo: e.version, Listener: mustAny(e.raw), LastUpdated: timestamppb.New(e.updated)}
	}
	for _, e := range sortedEntries(p.store.get(typeListener)) {
		dl := &adminv3.ListenersConfigDump_DynamicListener{Name: e.name}
		a := active[e.name]
		if a != nil {
			dl.ActiveState = state(a)
		}
		if a != e {
			dl.WarmingState = state(e)
		}
		d.DynamicListeners = append(d.DynamicListeners, dl)
	}
	return d
}

func (p *Proxy) routesDump() *adminv3.RoutesConfigDump {
	d := &adminv3.RoutesConfigDump{}
	for _, e := range sortedEntries(p.store.get(typeRoute)) {
		d.DynamicRouteConfigs = append(d.DynamicRouteConfigs, &adminv3.RoutesConfigDump_DynamicRouteConfig{
			VersionInfo: e.version, RouteConfig: mustAny(e.raw), LastUpdated: timestamppb.New(e.updated),
		})
	}
	return d
}

// secretsDump lists the secrets with every private key replaced by
// "[redacted]", as Envoy does.
func (p *Proxy) secretsDump() (*adminv3.SecretsConfigDump, error) {
	d := &adminv3.SecretsConfigDump{}
	for _, e := range sortedEntries(p.store.get(typeSecret)) {
		s, ok := proto.Clone(e.raw).(*tlsv3.Secret)
		if !ok {
			return nil, fmt.Errorf("secret %q has an unexpected type", e.name)
		}
		if c := s.GetTlsCertificate(); c != nil && c.GetPrivateKey() != nil {
			c.PrivateKey = &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: redactedSecretMarker}}
		}
		d.DynamicActiveSecrets = append(d.DynamicActiveSecrets, &adminv3.SecretsConfigDump_DynamicSecret{
			Name: e.name, VersionInfo: e.version, Secret: mustAny(s), LastUpdated: timestamppb.New(e.updated),
		})
	}
	return d, nil
}
