package sidecar

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	httpauthzv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_authz/v3"
	"google.golang.org/protobuf/types/known/anypb"
)

// typeHTTPExtAuthz is the HTTP ext_authz filter's config type.
const typeHTTPExtAuthz = "type.googleapis.com/envoy.extensions.filters.http.ext_authz.v3.ExtAuthz"

// httpAuthzConfig is a decoded HTTP ext_authz filter: a Check per request.
type httpAuthzConfig struct {
	failureModeAllow bool
	includePeerCert  bool
	statusOnError    int
	timeout          time.Duration
}

func decodeHTTPExtAuthz(typed *anypb.Any) (*httpAuthzConfig, error) {
	var m httpauthzv3.ExtAuthz
	if err := unmarshalAny(typed, &m); err != nil {
		return nil, fmt.Errorf("http ext_authz: %w", err)
	}
	if m.GetHttpService() != nil {
		return nil, errors.New("http ext_authz: http_service is not supported (use grpc_service)")
	}
	gs := m.GetGrpcService()
	eg := gs.GetEnvoyGrpc()
	if eg == nil {
		return nil, errors.New("http ext_authz: grpc_service.envoy_grpc is required")
	}
	if eg.GetClusterName() != localAgentName {
		return nil, fmt.Errorf("http ext_authz: cluster %q is not supported (want %q, the control plane)", eg.GetClusterName(), localAgentName)
	}
	if m.GetWithRequestBody() != nil {
		return nil, errors.New("http ext_authz: with_request_body is not supported")
	}
	out := &httpAuthzConfig{
		failureModeAllow: m.GetFailureModeAllow(),
		includePeerCert:  m.GetIncludePeerCertificate(),
		statusOnError:    http.StatusForbidden,
		timeout:          defaultHTTPAuthzTimeout,
	}
	if c := m.GetStatusOnError().GetCode(); c != 0 {
		out.statusOnError = int(c)
	}
	if t := gs.GetTimeout(); t != nil {
		if err := t.CheckValid(); err != nil || t.AsDuration() <= 0 {
			return nil, errors.New("http ext_authz: grpc_service.timeout must be positive")
		}
		out.timeout = t.AsDuration()
	}
	return out, nil
}

// defaultHTTPAuthzTimeout is Envoy's default gRPC ext_authz timeout (200ms)
// raised for a control plane on another host.
const defaultHTTPAuthzTimeout = 2 * time.Second
