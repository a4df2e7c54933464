package xds

import (
	"fmt"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	route "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tcpproxy "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// refs are the names a set of resources depends on.
type refs struct {
	clusters map[string]bool // from tcp_proxy, routes, gRPC services
	clas     map[string]bool // EDS clusters' load assignments
	secrets  map[string]bool // SDS names
	routes   map[string]bool // RDS names
}

func newRefs() *refs {
	return &refs{clusters: map[string]bool{}, clas: map[string]bool{}, secrets: map[string]bool{}, routes: map[string]bool{}}
}

// collect walks m, unpacking every Any (filters, transport sockets, the
// api_listener), so references hidden inside typed configs are found too —
// unlike Snapshot.Consistent, which misses api_listener routes.
func (r *refs) collect(m proto.Message) error {
	return r.walk(m.ProtoReflect())
}

func (r *refs) walk(m protoreflect.Message) error {
	switch v := m.Interface().(type) {
	case *anypb.Any:
		inner, err := v.UnmarshalNew()
		if err != nil {
			return fmt.Errorf("failed to unpack %s: %w", v.GetTypeUrl(), err)
		}
		return r.collect(inner)
	case *tcpproxy.TcpProxy:
		if c := v.GetCluster(); c != "" {
			r.clusters[c] = true
		}
	case *tcpproxy.TcpProxy_WeightedCluster_ClusterWeight:
		r.clusters[v.GetName()] = true
	case *route.RouteAction:
		if c := v.GetCluster(); c != "" {
			r.clusters[c] = true
		}
	case *route.WeightedCluster_ClusterWeight:
		r.clusters[v.GetName()] = true
	case *core.GrpcService_EnvoyGrpc:
		r.clusters[v.GetClusterName()] = true
	case *tlsv3.SdsSecretConfig:
		if _, ads := v.GetSdsConfig().GetConfigSourceSpecifier().(*core.ConfigSource_Ads); !ads && v.GetSdsConfig() != nil {
			// An external SDS server (an ingress listener's sds block):
			// its secret and cluster are the proxy's bootstrap's, not ours.
			return nil
		}
		r.secrets[v.GetName()] = true
	case *hcm.Rds:
		r.routes[v.GetRouteConfigName()] = true
	case *cluster.Cluster:
		if v.GetType() == cluster.Cluster_EDS {
			name := v.GetEdsClusterConfig().GetServiceName()
			if name == "" {
				name = v.GetName()
			}
			r.clas[name] = true
		}
	}
	var err error
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsList() && fd.Message() != nil:
			l := v.List()
			for i := 0; i < l.Len() && err == nil; i++ {
				err = r.walk(l.Get(i).Message())
			}
		case fd.IsMap() && fd.MapValue().Message() != nil:
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				err = r.walk(mv.Message())
				return err == nil
			})
		case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
			err = r.walk(v.Message())
		}
		return err == nil
	})
	return err
}

// checkConsistent verifies that every cluster the listeners and routes use
// is among clusters (or the bootstrap's local_agent), that every RDS name
// is among routes (the proxy's own), and that every load assignment and
// secret they need exists according to exists(typeURL, name).
func checkConsistent(listeners, clusters, routes []proto.Message, exists func(typeURL, name string) bool) error {
	r := newRefs()
	have := map[string]bool{LocalAgentCluster: true}
	haveRoutes := map[string]bool{}
	for _, rc := range routes {
		haveRoutes[rc.(*route.RouteConfiguration).GetName()] = true
		if err := r.collect(rc); err != nil {
			return err
		}
	}
	for _, c := range clusters {
		have[c.(*cluster.Cluster).GetName()] = true
		if err := r.collect(c); err != nil {
			return err
		}
	}
	for _, l := range listeners {
		if err := r.collect(l); err != nil {
			return err
		}
	}
	for c := range r.clusters {
		if !have[c] {
			return fmt.Errorf("%w: cluster %q is referenced but not served", ErrInconsistent, c)
		}
	}
	for n := range r.routes {
		if !haveRoutes[n] {
			return fmt.Errorf("%w: route config %q is referenced over RDS but not served", ErrInconsistent, n)
		}
	}
	for n := range r.clas {
		if !exists(endpointType, n) {
			return fmt.Errorf("%w: endpoints of cluster %q are not served", ErrInconsistent, n)
		}
	}
	for n := range r.secrets {
		if !exists(secretType, n) {
			return fmt.Errorf("%w: secret %q is not served", ErrInconsistent, n)
		}
	}
	return nil
}
