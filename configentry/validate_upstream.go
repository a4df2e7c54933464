package configentry

import (
	"fmt"

	consul "github.com/hashicorp/consul/api"
)

// validateUpstreamConfiguration checks a service-defaults UpstreamConfig as
// Consul does (Defaults unnamed, every Override named; limits and ejection
// settings in range) and normalizes the protocols it names. Settings
// meshlet does not implement (escape hatches, peers) are refused rather
// than ignored.
func validateUpstreamConfiguration(u *consul.UpstreamConfiguration) error {
	if u == nil {
		return nil
	}
	if d := u.Defaults; d != nil {
		if d.Name != "" || d.Namespace != "" || d.Partition != "" || d.Peer != "" {
			return invalidf("UpstreamConfig.Defaults: Name, Namespace, Partition and Peer must be empty (Defaults apply to every upstream)")
		}
		if err := validateUpstreamConfig("UpstreamConfig.Defaults", d); err != nil {
			return err
		}
	}
	seen := map[string]bool{}
	for i, o := range u.Overrides {
		where := fmt.Sprintf("UpstreamConfig.Overrides[%d]", i)
		if o == nil {
			return invalidf("%s is empty", where)
		}
		switch {
		case o.Name == "":
			return invalidf("%s: Name is required", where)
		case o.Name == "*" || len(o.Name) > 128 || !validName.MatchString(o.Name):
			return invalidf("%s: Name %q is not a valid service name", where, o.Name)
		case o.Peer != "":
			return invalidf("%s: Peer %q: cluster peering is not supported", where, o.Peer)
		case seen[o.Name]:
			return invalidf("%s: upstream %q is overridden more than once", where, o.Name)
		}
		seen[o.Name] = true
		if err := checkTenancy(where+".", o.Namespace, o.Partition); err != nil {
			return err
		}
		if err := validateUpstreamConfig(fmt.Sprintf("%s (%s)", where, o.Name), o); err != nil {
			return err
		}
	}
	return nil
}

// validateUpstreamConfig checks one Defaults or Overrides element.
func validateUpstreamConfig(where string, c *consul.UpstreamConfig) error {
	p, err := NormalizeProtocol(c.Protocol)
	if err != nil {
		return invalidf("%s.Protocol %q is not one of tcp, http, http2, grpc", where, c.Protocol)
	}
	c.Protocol = p
	switch {
	case c.EnvoyListenerJSON != "" || c.EnvoyClusterJSON != "":
		return invalidf("%s: EnvoyListenerJSON and EnvoyClusterJSON are not supported", where)
	case c.ConnectTimeoutMs < 0:
		return invalidf("%s.ConnectTimeoutMs must be >= 0", where)
	}
	if err := checkMeshGateway(where+".", &c.MeshGateway); err != nil {
		return err
	}
	if l := c.Limits; l != nil {
		for _, f := range []struct {
			name string
			v    *int
		}{{"MaxConnections", l.MaxConnections}, {"MaxPendingRequests", l.MaxPendingRequests}, {"MaxConcurrentRequests", l.MaxConcurrentRequests}} {
			if f.v != nil && (*f.v < 0 || int64(*f.v) > 1<<32-1) {
				return invalidf("%s.Limits.%s must be between 0 and 4294967295, not %d", where, f.name, *f.v)
			}
		}
		if l.PassiveHealthCheck != nil {
			return invalidf("%s.Limits.PassiveHealthCheck is for API gateways; use %s.PassiveHealthCheck", where, where)
		}
	}
	return validatePassiveHealthCheck(where+".PassiveHealthCheck", c.PassiveHealthCheck)
}

// validatePassiveHealthCheck checks the outlier detection settings.
func validatePassiveHealthCheck(where string, p *consul.PassiveHealthCheck) error {
	if p == nil {
		return nil
	}
	switch {
	case p.Interval < 0:
		return invalidf("%s.Interval %s must be >= 0", where, p.Interval)
	case p.BaseEjectionTime != nil && *p.BaseEjectionTime < 0:
		return invalidf("%s.BaseEjectionTime %s must be >= 0", where, *p.BaseEjectionTime)
	}
	for _, f := range []struct {
		name string
		v    *uint32
	}{
		{"EnforcingConsecutive5xx", p.EnforcingConsecutive5xx},
		{"EnforcingConsecutiveGatewayFailure", p.EnforcingConsecutiveGatewayFailure},
		{"MaxEjectionPercent", p.MaxEjectionPercent},
	} {
		if f.v != nil && *f.v > 100 {
			return invalidf("%s.%s %d must be a percentage between 0 and 100", where, f.name, *f.v)
		}
	}
	if p.ConsecutiveGatewayFailure != nil || p.EnforcingConsecutiveGatewayFailure != nil {
		return invalidf("%s: ConsecutiveGatewayFailure and EnforcingConsecutiveGatewayFailure are not supported (use MaxFailures)", where)
	}
	return nil
}
