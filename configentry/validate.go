package configentry

import (
	"fmt"
	"math"
	"strings"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/internal/lazyre"
)

// validate checks one entry on its own, as Consul's Normalize+Validate
// do, and normalizes it in place (kind and protocol lower-cased,
// proxy-defaults named "global"). Every error wraps ErrInvalid (or
// ErrUnknownKind) and says, in one line, which entry and field is wrong.
func validate(e Entry) error {
	if e == nil {
		return invalidf("no entry")
	}
	kind := strings.ToLower(e.GetKind())
	if !KnownKind(kind) {
		return fmt.Errorf("%w: %q (known: %s)", ErrUnknownKind, e.GetKind(), strings.Join(Kinds, ", "))
	}
	setKind(e, kind)
	var err error
	switch v := e.(type) {
	case *consul.ProxyConfigEntry:
		err = validateProxyDefaults(v)
	case *consul.ServiceConfigEntry:
		err = validateServiceDefaults(v)
	case *consul.ServiceRouterConfigEntry:
		err = validateRouter(v)
	case *consul.ServiceSplitterConfigEntry:
		err = validateSplitter(v)
	case *consul.ServiceResolverConfigEntry:
		err = validateResolver(v)
	case *consul.IngressGatewayConfigEntry:
		err = validateIngressGateway(v)
	case *consul.TerminatingGatewayConfigEntry:
		err = validateTerminatingGateway(v)
	default:
		return fmt.Errorf("%w: %q is not a %T", ErrUnknownKind, kind, e)
	}
	if err != nil {
		return fmt.Errorf("%w: %s/%s: %s", ErrInvalid, kind, e.GetName(), strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": "))
	}
	return nil
}

// validName is Consul's service name shape (DNS-compatible, lenient on case).
var validName = lazyre.New(`^[A-Za-z0-9]([A-Za-z0-9_.-]*[A-Za-z0-9])?$`)

// validSubsetName is Consul's subset name shape.
var validSubsetName = lazyre.New(`^[a-z0-9]([a-z0-9-]*[a-z0-9])?$`)

func checkName(name string) error {
	switch {
	case name == "":
		return invalidf("Name is required")
	case len(name) > 128 || !validName.MatchString(name):
		return invalidf("Name %q is not a valid service name", name)
	}
	return nil
}

// checkTenancy refuses namespaces and partitions other than the default:
// meshlet has one of each.
func checkTenancy(where, ns, partition string) error {
	if ns != "" && ns != "default" {
		return invalidf("%sNamespace %q: only the default namespace exists", where, ns)
	}
	if partition != "" && partition != "default" {
		return invalidf("%sPartition %q: only the default partition exists", where, partition)
	}
	return nil
}

// NormalizeProtocol lower-cases a protocol and checks it is one meshlet
// serves ("" stays "").
func NormalizeProtocol(p string) (string, error) {
	p = strings.ToLower(strings.TrimSpace(p))
	switch p {
	case "", ProtocolTCP, ProtocolHTTP, ProtocolHTTP2, ProtocolGRPC:
		return p, nil
	}
	return p, invalidf("Protocol %q is not one of tcp, http, http2, grpc", p)
}

func validateProxyDefaults(e *consul.ProxyConfigEntry) error {
	if e.Name == "" {
		e.Name = GlobalName
	}
	if e.Name != GlobalName {
		return invalidf("Name %q: a proxy-defaults entry must be named %q", e.Name, GlobalName)
	}
	if err := checkTenancy("", e.Namespace, e.Partition); err != nil {
		return err
	}
	if err := checkMeshGateway("", &e.MeshGateway); err != nil {
		return err
	}
	for k, v := range e.Config {
		if !strings.EqualFold(k, "protocol") {
			continue
		}
		s, ok := v.(string)
		if !ok {
			return invalidf("Config.protocol: expected a string, got %s", typeName(v))
		}
		p, err := NormalizeProtocol(s)
		if err != nil {
			return invalidf("Config.protocol %q is not one of tcp, http, http2, grpc", s)
		}
		delete(e.Config, k)
		e.Config["protocol"] = p
	}
	return nil
}

func validateServiceDefaults(e *consul.ServiceConfigEntry) error {
	if err := checkName(e.Name); err != nil {
		return err
	}
	if err := checkTenancy("", e.Namespace, e.Partition); err != nil {
		return err
	}
	p, err := NormalizeProtocol(e.Protocol)
	if err != nil {
		return err
	}
	e.Protocol = p
	switch {
	case e.MaxInboundConnections < 0:
		return invalidf("MaxInboundConnections must be >= 0")
	case e.LocalConnectTimeoutMs < 0:
		return invalidf("LocalConnectTimeoutMs must be >= 0")
	case e.LocalRequestTimeoutMs < 0:
		return invalidf("LocalRequestTimeoutMs must be >= 0")
	}
	if err := checkMeshGateway("", &e.MeshGateway); err != nil {
		return err
	}
	return validateUpstreamConfiguration(e.UpstreamConfig)
}

func validateSplitter(e *consul.ServiceSplitterConfigEntry) error {
	if err := checkName(e.Name); err != nil {
		return err
	}
	if err := checkTenancy("", e.Namespace, e.Partition); err != nil {
		return err
	}
	if len(e.Splits) == 0 {
		return invalidf("no Splits configured (at least one is required)")
	}
	seen := map[[2]string]bool{}
	var sum float64
	for i, sp := range e.Splits {
		where := fmt.Sprintf("Splits[%d].", i)
		if math.IsNaN(float64(sp.Weight)) || sp.Weight < 0 || sp.Weight > 100 {
			return invalidf("%sWeight %v must be between 0 and 100", where, sp.Weight)
		}
		if err := checkTenancy(where, sp.Namespace, sp.Partition); err != nil {
			return err
		}
		svc := sp.Service
		if svc == "" {
			svc = e.Name
		}
		if sp.ServiceSubset != "" && !validSubsetName.MatchString(sp.ServiceSubset) {
			return invalidf("%sServiceSubset %q is not a valid subset name", where, sp.ServiceSubset)
		}
		k := [2]string{svc, sp.ServiceSubset}
		if seen[k] {
			return invalidf("%s: split destination %s occurs more than once", where[:len(where)-1], destName(svc, sp.ServiceSubset))
		}
		seen[k] = true
		if err := checkHeaderMods(where+"RequestHeaders", sp.RequestHeaders); err != nil {
			return err
		}
		if err := checkHeaderMods(where+"ResponseHeaders", sp.ResponseHeaders); err != nil {
			return err
		}
		sum += float64(sp.Weight)
	}
	if math.Abs(sum-100) > 0.01 {
		return invalidf("the split weights must sum to 100, not %s", trimFloat(sum))
	}
	return nil
}

func destName(svc, subset string) string {
	if subset == "" {
		return fmt.Sprintf("service %q", svc)
	}
	return fmt.Sprintf("service %q subset %q", svc, subset)
}

func trimFloat(f float64) string {
	return strings.TrimRight(strings.TrimRight(fmt.Sprintf("%.4f", f), "0"), ".")
}

func checkHeaderMods(where string, m *consul.HTTPHeaderModifiers) error {
	if m == nil {
		return nil
	}
	for _, set := range []map[string]string{m.Add, m.Set} {
		for k := range set {
			if strings.TrimSpace(k) == "" {
				return invalidf("%s: a header name is empty", where)
			}
		}
	}
	for _, k := range m.Remove {
		if strings.TrimSpace(k) == "" {
			return invalidf("%s.Remove: a header name is empty", where)
		}
	}
	return nil
}
