// Package authz is meshlet's connection authorization service: Envoy's
// ext_authz (envoy.service.auth.v3.Authorization) over gRPC, used by the
// public listener of every sidecar (Envoy or the built-in proxy), and the
// decision behind /v1/agent/connect/authorize.
//
// Identities: the source is CheckRequest.Attributes.Source.Principal, the
// URI SAN of the peer certificate that Envoy's network ext_authz filter
// fills from the TLS connection. The destination service is parsed from
// Attributes.Destination.Principal (the local certificate's URI SAN); when
// that is empty it is taken from the context extension "destination", then
// from the metadata context key "destination" under the filter namespace
// "meshlet" (either a SPIFFE URI or a bare service name). Both identities
// must belong to the CA's trust domain and the default namespace; anything
// missing, malformed or foreign is denied with PermissionDenied and a
// reason. Otherwise the intentions decide, evaluated on every call, so a
// change applies to the next connection at once.
//
// Concurrency: a Service is stateless apart from metrics and safe for
// concurrent use.
package authz

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync/atomic"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	typev3 "github.com/envoyproxy/go-control-plane/envoy/type/v3"
	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"

	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/intention"
)

// Destination fallbacks when Destination.Principal is empty.
const (
	DestinationKey       = "destination"
	MetadataNamespace    = "meshlet"
	resultAllow          = "allow"
	resultDeny           = "deny"
	decisionsMetricsName = "meshlet_authz_decisions_total"
)

// ErrInvalidRequest: an identity or destination in an authorization request
// is missing or malformed (the HTTP API answers 400).
var ErrInvalidRequest = errors.New("invalid authorization request")

// Decision is the outcome of an authorization.
type Decision struct {
	Allowed bool
	Reason  string
	// Matched is the deciding intention; nil when the default policy (or
	// an identity check) decided.
	Matched *intention.Intention
	// Permission is the index of the deciding permission of an L7
	// intention (intention.NoPermission: none decided).
	Permission int
}

// Service implements authv3.AuthorizationServer.
type Service struct {
	authv3.UnimplementedAuthorizationServer

	ca        *ca.Manager
	ix        *intention.Store
	logger    hclog.Logger
	decisions *prometheus.CounterVec
	protocol  atomic.Pointer[func(service string) string]
	ep        *epochs // see epoch.go
}

// SetProtocols tells the service how to find a destination's protocol
// (its service-defaults); without it every destination counts as tcp.
// An L7 intention admits a connection only to an HTTP destination, whose
// proxy then asks for every request.
func (s *Service) SetProtocols(fn func(service string) string) { s.protocol.Store(&fn) }

func (s *Service) isHTTP(service string) bool {
	fn := s.protocol.Load()
	if fn == nil {
		return false
	}
	switch (*fn)(service) {
	case "http", "http2", "grpc":
		return true
	}
	return false
}

// New returns the service. reg may be nil.
func New(caMgr *ca.Manager, ix *intention.Store, logger hclog.Logger, reg prometheus.Registerer) *Service {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	s := &Service{
		ca:     caMgr,
		ix:     ix,
		logger: logger.Named("authz"),
		ep:     newEpochs(),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: decisionsMetricsName,
			Help: "Connection authorization decisions by result.",
		}, []string{"result"}),
	}
	if reg != nil {
		if err := reg.Register(s.decisions); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				if existing, ok := are.ExistingCollector.(*prometheus.CounterVec); ok {
					s.decisions = existing
				}
			} else {
				s.logger.Warn("failed to register metrics", "error", err)
			}
		}
	}
	return s
}

// Register registers the service on g.
func (s *Service) Register(g *grpc.Server) { authv3.RegisterAuthorizationServer(g, s) }

// Authorize decides whether the identity sourceURI may connect to
// destService. A malformed sourceURI or destService returns an error
// wrapping ErrInvalidRequest (and a deny Decision); a foreign trust domain
// is a plain deny.
func (s *Service) Authorize(sourceURI, destService string) (Decision, error) {
	d, err := s.decide(sourceURI, destService)
	s.record(d)
	return d, err
}

func (s *Service) decide(sourceURI, destService string) (Decision, error) {
	src, err := ca.ParseSpiffeID(sourceURI)
	if err != nil {
		return deny("source identity is not a service identity: " + err.Error()), fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	if !ca.ValidServiceName(destService) {
		return deny(fmt.Sprintf("invalid destination service %q", destService)), fmt.Errorf("%w: destination service %q", ErrInvalidRequest, destService)
	}
	if src.TrustDomain != s.ca.TrustDomain() {
		return deny(fmt.Sprintf("source identity %s is from a foreign trust domain", sourceURI)), nil
	}
	if src.Namespace != ca.DefaultNamespace {
		return deny(fmt.Sprintf("source namespace %q is unknown", src.Namespace)), nil
	}
	allowed, m := s.ix.Check(src.Service, destService)
	if m != nil && m.IsL7() {
		return s.l7Connection(m, destService), nil
	}
	d := Decision{Allowed: allowed, Matched: m, Permission: intention.NoPermission}
	verb := "denied"
	if allowed {
		verb = "allowed"
	}
	if m != nil {
		d.Reason = fmt.Sprintf("%s by intention %s", verb, m)
	} else {
		d.Reason = fmt.Sprintf("%s by the default policy: no intention matches %s => %s", verb, src.Service, destService)
	}
	return d, nil
}

func deny(reason string) Decision {
	return Decision{Reason: reason, Permission: intention.NoPermission}
}

func (s *Service) record(d Decision) {
	result := resultDeny
	if d.Allowed {
		result = resultAllow
	}
	s.decisions.WithLabelValues(result).Inc()
}

// Check implements envoy.service.auth.v3.Authorization. It never returns a
// gRPC error: every failure is a PermissionDenied response with a reason.
func (s *Service) Check(_ context.Context, req *authv3.CheckRequest) (*authv3.CheckResponse, error) {
	epoch := s.Epoch() // before deciding: see epoch.go
	d := s.checkDecision(req.GetAttributes())
	s.record(d)
	if d.Allowed {
		resp := &authv3.CheckResponse{
			Status:       &rpcstatus.Status{Code: int32(codes.OK)},
			HttpResponse: &authv3.CheckResponse_OkResponse{OkResponse: &authv3.OkHttpResponse{}},
		}
		markCacheable(resp, d, epoch)
		return resp, nil
	}
	s.logger.Debug("connection denied", "source", req.GetAttributes().GetSource().GetPrincipal(), "reason", d.Reason)
	return &authv3.CheckResponse{
		Status: &rpcstatus.Status{Code: int32(codes.PermissionDenied), Message: d.Reason},
		HttpResponse: &authv3.CheckResponse_DeniedResponse{DeniedResponse: &authv3.DeniedHttpResponse{
			Status: &typev3.HttpStatus{Code: typev3.StatusCode_Forbidden},
			Body:   d.Reason,
		}},
	}, nil
}

func (s *Service) checkDecision(attrs *authv3.AttributeContext) Decision {
	src := attrs.GetSource().GetPrincipal()
	if src == "" {
		return deny("no source principal: the peer presented no certificate URI SAN")
	}
	dst, err := s.destination(attrs)
	if err != nil {
		return deny(err.Error())
	}
	if req, ok := requestOf(attrs); ok {
		d, _ := s.decideRequest(src, dst, req) // an error is already a deny Decision
		return d
	}
	d, _ := s.decide(src, dst) // an error is already a deny Decision
	return d
}

// destinationValue is where a request names its destination: the
// destination principal, else the context extension or metadata
// DestinationKey.
func destinationValue(attrs *authv3.AttributeContext) string {
	v := attrs.GetDestination().GetPrincipal()
	if v == "" {
		v = attrs.GetContextExtensions()[DestinationKey]
	}
	if v == "" {
		v = metadataString(attrs.GetMetadataContext(), MetadataNamespace, DestinationKey)
	}
	return v
}

// DestinationService is the service a check request asks about, by name
// only (a SPIFFE ID's service, whatever its trust domain; "" when none can
// be read): what a caller may ask about is scoped by it, while Check
// itself validates the identity.
func DestinationService(attrs *authv3.AttributeContext) string {
	v := destinationValue(attrs)
	if !strings.HasPrefix(strings.ToLower(v), "spiffe:") {
		return v
	}
	id, err := ca.ParseSpiffeID(v)
	if err != nil {
		return ""
	}
	return id.Service
}

// destination extracts the destination service (see the package doc).
func (s *Service) destination(attrs *authv3.AttributeContext) (string, error) {
	v := destinationValue(attrs)
	if v == "" {
		return "", fmt.Errorf("no destination principal, context extension or metadata %q", DestinationKey)
	}
	if !strings.HasPrefix(strings.ToLower(v), "spiffe:") {
		if !ca.ValidServiceName(v) {
			return "", fmt.Errorf("invalid destination service %q", v)
		}
		return v, nil
	}
	id, err := ca.ParseSpiffeID(v)
	if err != nil {
		return "", fmt.Errorf("destination identity is not a service identity: %w", err)
	}
	if id.TrustDomain != s.ca.TrustDomain() {
		return "", fmt.Errorf("destination identity %s is from a foreign trust domain", v)
	}
	if id.Namespace != ca.DefaultNamespace {
		return "", fmt.Errorf("destination namespace %q is unknown", id.Namespace)
	}
	return id.Service, nil
}

func metadataString(md *corev3.Metadata, ns, key string) string {
	return md.GetFilterMetadata()[ns].GetFields()[key].GetStringValue()
}
