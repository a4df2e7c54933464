package configentry

import (
	"fmt"
	"strings"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/internal/lazyre"
)

// IngressGateway is the kind of an ingress gateway's entry: its listeners
// and the services each routes to. Its name is the gateway service's.
const IngressGateway = consul.IngressGateway // "ingress-gateway"

// ingressHostRE is a DNS name with an optional leading "*." label and an
// optional port.
var ingressHostRE = lazyre.New(`^(\*\.)?([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?\.)*[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(:[0-9]{1,5})?$`)

// validateIngressGateway applies Consul's rules for an ingress-gateway
// entry, refusing what meshlet does not run yet (header changes, service
// limits). Protocols are
// lower-cased, an empty one becomes tcp.
func validateIngressGateway(e *consul.IngressGatewayConfigEntry) error {
	if err := checkName(e.Name); err != nil {
		return err
	}
	if err := checkTenancy("", e.Namespace, e.Partition); err != nil {
		return err
	}
	if e.Defaults != nil {
		return invalidf("Defaults: service limits are not supported by meshlet yet")
	}
	ports := map[int]bool{}
	for i := range e.Listeners {
		l := &e.Listeners[i]
		where := fmt.Sprintf("Listeners[%d]", i)
		if l.Port < 1 || l.Port > 65535 {
			return invalidf("%s.Port %d is out of range 1-65535", where, l.Port)
		}
		if ports[l.Port] {
			return invalidf("%s.Port %d: listeners must have unique ports", where, l.Port)
		}
		ports[l.Port] = true
		if err := validateIngressListener(l, where); err != nil {
			return err
		}
	}
	return validateIngressTLS(e)
}

func validateIngressListener(l *consul.IngressListener, where string) error {
	l.Protocol = strings.ToLower(strings.TrimSpace(l.Protocol))
	if l.Protocol == "" {
		l.Protocol = ProtocolTCP
	}
	switch l.Protocol {
	case ProtocolTCP, ProtocolHTTP, ProtocolHTTP2, ProtocolGRPC:
	default:
		return invalidf("%s.Protocol %q is not one of tcp, http, http2, grpc", where, l.Protocol)
	}
	if len(l.Services) == 0 {
		return invalidf("%s: no service; a listener needs at least one", where)
	}
	if l.Protocol == ProtocolTCP && len(l.Services) > 1 {
		return invalidf("%s: multiple services per listener are only supported for protocol = \"http\"", where)
	}
	names, hosts := map[string]bool{}, map[string]bool{}
	// domains are the Host values each service's hosts route on this
	// listener (a host without a port also as host:port): two services
	// routing one would make Envoy refuse the listener's routes.
	domains := map[string]string{}
	for j := range l.Services {
		s := &l.Services[j]
		sw := fmt.Sprintf("%s.Services[%d]", where, j)
		switch {
		case s.Name == "*" && l.Protocol == ProtocolTCP:
			return invalidf("%s: the wildcard service \"*\" is only valid for protocol = \"http\" (listener on port %d)", sw, l.Port)
		case s.Name == "*" && len(s.Hosts) > 0:
			return invalidf("%s.Hosts: associating hosts to a wildcard service is not supported", sw)
		case s.Name != "*" && checkName(s.Name) != nil:
			return invalidf("%s.Name %q is not a valid service name", sw, s.Name)
		case names[s.Name]:
			return invalidf("%s.Name %q: a service may appear once per listener", sw, s.Name)
		case s.RequestHeaders != nil || s.ResponseHeaders != nil:
			return invalidf("%s: header changes are not supported by meshlet yet", sw)
		case s.TLS != nil && l.Protocol == ProtocolTCP:
			return invalidf("%s.TLS: a service's own TLS is only valid on http, http2 and grpc listeners (a tcp listener's is the listener's)", sw)
		case s.TLS != nil && s.TLS.SDS != nil && (s.TLS.SDS.CertResource == "" || len(s.Hosts) == 0 || s.Name == "*"):
			return invalidf("%s.TLS.SDS: a service's certificate from SDS needs a CertResource and hosts (its SNI names), and no wildcard service", sw)
		case s.MaxConnections != nil || s.MaxPendingRequests != nil || s.MaxConcurrentRequests != nil || s.PassiveHealthCheck != nil:
			return invalidf("%s: service limits are not supported by meshlet yet", sw)
		}
		if err := checkTenancy(sw+".", s.Namespace, s.Partition); err != nil {
			return err
		}
		names[s.Name] = true
		if len(s.Hosts) > 0 && l.Protocol == ProtocolTCP {
			return invalidf("%s.Hosts: associating hosts to a service is not supported for the tcp protocol", sw)
		}
		for _, h := range s.Hosts {
			k := strings.ToLower(h)
			switch {
			case h == "*" && len(s.Hosts) > 1:
				return invalidf("%s.Hosts: \"*\" matches every host and cannot be listed with others", sw)
			case h != "*" && !ingressHostRE.MatchString(h):
				return invalidf("%s.Hosts: %q is not a valid DNS name (a wildcard must be the whole leftmost label)", sw, h)
			case hosts[k]:
				return invalidf("%s.Hosts: %q: hosts must be unique within a listener", sw, h)
			}
			hosts[k] = true
			ds := []string{k}
			if h != "*" && !strings.Contains(h, ":") {
				ds = append(ds, fmt.Sprintf("%s:%d", k, l.Port))
			}
			for _, d := range ds {
				if other, ok := domains[d]; ok && other != s.Name {
					return invalidf("%s.Hosts: %q routes Host %q, which service %q routes on this listener already", sw, h, d, other)
				}
				domains[d] = s.Name
			}
		}
	}
	return nil
}

// ingressProblems: a tcp listener forwards bytes, so the service behind it
// must be a tcp service (Consul's rule; an http listener may front a tcp
// service in meshlet, whose HTTP/1.1 then passes its public listener as
// bytes).
func (s *Set) ingressProblems(add func(string, ...any), e *consul.IngressGatewayConfigEntry) {
	for i, l := range e.Listeners {
		if orDefault(strings.ToLower(l.Protocol), ProtocolTCP) != ProtocolTCP {
			continue
		}
		for _, svc := range l.Services {
			if p := s.protocol(svc.Name); IsHTTP(p) {
				add("%s Listeners[%d]: service %q has protocol %q, which does not match the listener's protocol \"tcp\"", KeyOf(e), i, svc.Name, p)
			}
		}
	}
}
