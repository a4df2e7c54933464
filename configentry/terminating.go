package configentry

import (
	"fmt"

	consul "github.com/hashicorp/consul/api"
)

// TerminatingGateway is the kind of a terminating gateway's entry: the
// services outside the mesh it acts for, and the TLS it originates to
// each. Its name is the gateway service's.
const TerminatingGateway = consul.TerminatingGateway // "terminating-gateway"

// validateTerminatingGateway applies Consul's rules for a
// terminating-gateway entry, refusing what meshlet does not run yet (a
// wildcard service, other namespaces and partitions).
func validateTerminatingGateway(e *consul.TerminatingGatewayConfigEntry) error {
	if err := checkName(e.Name); err != nil {
		return err
	}
	if err := checkTenancy("", e.Namespace, e.Partition); err != nil {
		return err
	}
	names := map[string]bool{}
	for i := range e.Services {
		s := &e.Services[i]
		where := fmt.Sprintf("Services[%d]", i)
		switch {
		case s.Name == "":
			return invalidf("%s.Name: service name cannot be blank", where)
		case s.Name == "*":
			return invalidf("%s: the wildcard service \"*\" is not supported by meshlet yet", where)
		case checkName(s.Name) != nil:
			return invalidf("%s.Name %q is not a valid service name", where, s.Name)
		case names[s.Name]:
			return invalidf("%s.Name: service %q was specified more than once", where, s.Name)
		}
		names[s.Name] = true
		if err := checkTenancy(where+".", s.Namespace, ""); err != nil {
			return err
		}
		if (s.CertFile != "" || s.KeyFile != "") && (s.CAFile == "" || s.CertFile == "" || s.KeyFile == "") {
			return invalidf("%s: service %q must have a CertFile, CAFile, and KeyFile specified for TLS origination", where, s.Name)
		}
		if s.SNI != "" && s.CAFile == "" {
			return invalidf("%s: service %q: SNI was specified, but CAFile was not", where, s.Name)
		}
	}
	return nil
}

// LinkedGateways maps each service linked to a terminating gateway to the
// gateways (entry names, sorted) that act for it.
func (s *Set) LinkedGateways() map[string][]string {
	out := map[string][]string{}
	for _, e := range s.List(TerminatingGateway) {
		t := e.(*consul.TerminatingGatewayConfigEntry)
		for _, svc := range t.Services {
			out[svc.Name] = append(out[svc.Name], t.Name)
		}
	}
	return out
}

// LinkedService returns the TLS settings of service as linked to the
// terminating gateway gw.
func (s *Set) LinkedService(gw, service string) (consul.LinkedService, bool) {
	t, _ := s.Get(TerminatingGateway, gw).(*consul.TerminatingGatewayConfigEntry)
	if t == nil {
		return consul.LinkedService{}, false
	}
	for _, svc := range t.Services {
		if svc.Name == service {
			return svc, true
		}
	}
	return consul.LinkedService{}, false
}
