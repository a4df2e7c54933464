package xds

import (
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	httpauthz "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
)

// httpExtAuthzFilter is the HTTP filter name of Envoy's ext_authz.
const httpExtAuthzFilter = "envoy.filters.http.ext_authz"

// httpExtAuthz asks the agent (local_agent, gRPC, fail closed) about every
// request on an HTTP public listener, so L7 intentions (permissions on
// path, method and headers) are decided per request; the network
// ext_authz in front of it still decides per connection.
func httpExtAuthz() (*hcm.HttpFilter, error) {
	a, err := anyOf(&httpauthz.ExtAuthz{
		Services: &httpauthz.ExtAuthz_GrpcService{GrpcService: &core.GrpcService{
			TargetSpecifier: &core.GrpcService_EnvoyGrpc_{EnvoyGrpc: &core.GrpcService_EnvoyGrpc{ClusterName: LocalAgentCluster}},
		}},
		TransportApiVersion:    core.ApiVersion_V3,
		IncludePeerCertificate: true,
		FailureModeAllow:       false,
	})
	if err != nil {
		return nil, err
	}
	return &hcm.HttpFilter{Name: httpExtAuthzFilter, ConfigType: &hcm.HttpFilter_TypedConfig{TypedConfig: a}}, nil
}
