package configentry

import (
	"fmt"
	"strings"

	consul "github.com/hashicorp/consul/api"
)

// Load balancer policies a resolver may name.
const (
	LBRoundRobin   = "round_robin"
	LBLeastRequest = "least_request"
	LBRandom       = "random"
	LBRingHash     = "ring_hash"
	LBMaglev       = "maglev"
)

func validateResolver(e *consul.ServiceResolverConfigEntry) error {
	if err := checkName(e.Name); err != nil {
		return err
	}
	if err := checkTenancy("", e.Namespace, e.Partition); err != nil {
		return err
	}
	for _, name := range sortedKeys(e.Subsets) {
		if !validSubsetName.MatchString(name) {
			return invalidf("Subsets: %q is not a valid subset name (lower-case letters, digits and dashes)", name)
		}
		if err := ValidateFilter(e.Subsets[name].Filter); err != nil {
			return invalidf("Subsets[%q]: %s", name, strings.TrimPrefix(err.Error(), ErrInvalid.Error()+": "))
		}
	}
	if e.DefaultSubset != "" {
		if _, ok := e.Subsets[e.DefaultSubset]; !ok {
			return invalidf("DefaultSubset %q is not a subset of this resolver", e.DefaultSubset)
		}
	}
	if e.Redirect != nil {
		if err := checkRedirect(e); err != nil {
			return err
		}
	}
	for _, key := range sortedKeys(e.Failover) {
		if err := checkFailover(e, key, e.Failover[key]); err != nil {
			return err
		}
	}
	if e.ConnectTimeout < 0 {
		return invalidf("ConnectTimeout %s must be >= 0", e.ConnectTimeout)
	}
	if e.RequestTimeout < 0 {
		return invalidf("RequestTimeout %s must be >= 0", e.RequestTimeout)
	}
	if p := e.PrioritizeByLocality; p != nil && p.Mode != "" && p.Mode != "none" {
		return invalidf("PrioritizeByLocality.Mode %q is not supported", p.Mode)
	}
	return checkLoadBalancer(e.LoadBalancer)
}

func checkRedirect(e *consul.ServiceResolverConfigEntry) error {
	r := e.Redirect
	switch {
	case len(e.Subsets) > 0:
		return invalidf("Redirect and Subsets cannot both be set")
	case e.DefaultSubset != "":
		return invalidf("Redirect and DefaultSubset cannot both be set")
	case len(e.Failover) > 0:
		return invalidf("Redirect and Failover cannot both be set")
	case r.Peer != "" || r.SamenessGroup != "":
		return invalidf("Redirect: Peer and SamenessGroup are not supported")
	case r.Service == "" && r.ServiceSubset == "" && r.Datacenter == "" && r.Namespace == "" && r.Partition == "":
		return invalidf("Redirect is empty (set Service, ServiceSubset or Datacenter)")
	case r.ServiceSubset != "" && r.Service == "":
		return invalidf("Redirect.ServiceSubset %q defined without Redirect.Service", r.ServiceSubset)
	case r.ServiceSubset != "" && !validSubsetName.MatchString(r.ServiceSubset):
		return invalidf("Redirect.ServiceSubset %q is not a valid subset name", r.ServiceSubset)
	}
	if r.Service != "" && checkName(r.Service) != nil {
		return invalidf("Redirect.Service %q is not a valid service name", r.Service)
	}
	if (r.Service == "" || r.Service == e.Name) && r.ServiceSubset == "" && r.Datacenter == "" {
		return invalidf("Redirect points back to service %q itself", e.Name)
	}
	return checkTenancy("Redirect.", r.Namespace, r.Partition)
}

func checkFailover(e *consul.ServiceResolverConfigEntry, key string, f consul.ServiceResolverFailover) error {
	where := fmt.Sprintf("Failover[%q]", key)
	if key != "*" {
		if _, ok := e.Subsets[key]; !ok {
			return invalidf("%s: %q is not a subset of this resolver (use a subset name or \"*\")", where, key)
		}
	}
	switch {
	case f.SamenessGroup != "":
		return invalidf("%s: SamenessGroup is not supported", where)
	case f.Service == "" && f.ServiceSubset == "" && f.Namespace == "" && len(f.Datacenters) == 0 && len(f.Targets) == 0:
		return invalidf("%s: one of Service, ServiceSubset, Datacenters or Targets is required", where)
	case len(f.Targets) > 0 && (f.Service != "" || f.ServiceSubset != "" || f.Namespace != "" || len(f.Datacenters) > 0):
		return invalidf("%s: Targets cannot be set with Service, ServiceSubset, Namespace or Datacenters", where)
	}
	if f.Policy != nil && f.Policy.Mode != "" && f.Policy.Mode != "sequential" {
		return invalidf("%s.Policy.Mode %q is not supported (only \"sequential\")", where, f.Policy.Mode)
	}
	if f.Service != "" && checkName(f.Service) != nil {
		return invalidf("%s.Service %q is not a valid service name", where, f.Service)
	}
	if f.ServiceSubset != "" {
		if !validSubsetName.MatchString(f.ServiceSubset) {
			return invalidf("%s.ServiceSubset %q is not a valid subset name", where, f.ServiceSubset)
		}
		if f.Service == "" || f.Service == e.Name {
			if _, ok := e.Subsets[f.ServiceSubset]; !ok {
				return invalidf("%s.ServiceSubset %q is not a subset of %q", where, f.ServiceSubset, e.Name)
			}
		}
	}
	for i, dc := range f.Datacenters {
		if strings.TrimSpace(dc) == "" {
			return invalidf("%s.Datacenters[%d] is empty", where, i)
		}
	}
	if err := checkTenancy(where+".", f.Namespace, ""); err != nil {
		return err
	}
	for i, t := range f.Targets {
		tw := fmt.Sprintf("%s.Targets[%d]", where, i)
		switch {
		case t.Peer != "":
			return invalidf("%s: Peer is not supported", tw)
		case t.Service == "" && t.ServiceSubset == "" && t.Datacenter == "" && t.Namespace == "" && t.Partition == "":
			return invalidf("%s is empty (set Service, ServiceSubset or Datacenter)", tw)
		case t.Service != "" && checkName(t.Service) != nil:
			return invalidf("%s.Service %q is not a valid service name", tw, t.Service)
		case t.ServiceSubset != "" && !validSubsetName.MatchString(t.ServiceSubset):
			return invalidf("%s.ServiceSubset %q is not a valid subset name", tw, t.ServiceSubset)
		}
		if t.ServiceSubset != "" && (t.Service == "" || t.Service == e.Name) {
			if _, ok := e.Subsets[t.ServiceSubset]; !ok {
				return invalidf("%s.ServiceSubset %q is not a subset of %q", tw, t.ServiceSubset, e.Name)
			}
		}
		if err := checkTenancy(tw+".", t.Namespace, t.Partition); err != nil {
			return err
		}
	}
	return nil
}

func checkLoadBalancer(lb *consul.LoadBalancer) error {
	if lb == nil {
		return nil
	}
	lb.Policy = strings.ToLower(strings.TrimSpace(lb.Policy))
	switch lb.Policy {
	case "", LBRoundRobin, LBLeastRequest, LBRandom, LBRingHash, LBMaglev:
	default:
		return invalidf("LoadBalancer.Policy %q is not one of round_robin, least_request, random, ring_hash, maglev", lb.Policy)
	}
	hashing := lb.Policy == LBRingHash || lb.Policy == LBMaglev
	switch {
	case lb.RingHashConfig != nil && lb.Policy != LBRingHash:
		return invalidf("LoadBalancer.RingHashConfig is only for policy ring_hash, not %q", lb.Policy)
	case lb.LeastRequestConfig != nil && lb.Policy != LBLeastRequest:
		return invalidf("LoadBalancer.LeastRequestConfig is only for policy least_request, not %q", lb.Policy)
	case len(lb.HashPolicies) > 0 && !hashing:
		return invalidf("LoadBalancer.HashPolicies are only for policies ring_hash and maglev, not %q", lb.Policy)
	}
	if rh := lb.RingHashConfig; rh != nil && rh.MaximumRingSize != 0 && rh.MinimumRingSize > rh.MaximumRingSize {
		return invalidf("LoadBalancer.RingHashConfig: MinimumRingSize %d exceeds MaximumRingSize %d", rh.MinimumRingSize, rh.MaximumRingSize)
	}
	for i, hp := range lb.HashPolicies {
		if err := checkHashPolicy(fmt.Sprintf("LoadBalancer.HashPolicies[%d]", i), hp); err != nil {
			return err
		}
	}
	return nil
}

func checkHashPolicy(where string, hp consul.HashPolicy) error {
	switch hp.Field {
	case "", "header", "cookie", "query_parameter":
	default:
		return invalidf("%s.Field %q is not one of header, cookie, query_parameter", where, hp.Field)
	}
	switch {
	case hp.SourceIP && (hp.Field != "" || hp.FieldValue != ""):
		return invalidf("%s: SourceIP cannot be set with Field or FieldValue", where)
	case !hp.SourceIP && hp.Field == "":
		return invalidf("%s: one of Field or SourceIP is required", where)
	case hp.Field != "" && hp.FieldValue == "":
		return invalidf("%s: Field %q needs a FieldValue", where, hp.Field)
	case hp.CookieConfig != nil && hp.Field != "cookie":
		return invalidf("%s: CookieConfig is only for Field \"cookie\"", where)
	case hp.CookieConfig != nil && hp.CookieConfig.Session && hp.CookieConfig.TTL != 0:
		return invalidf("%s.CookieConfig: Session and TTL cannot both be set", where)
	case hp.CookieConfig != nil && hp.CookieConfig.TTL < 0:
		return invalidf("%s.CookieConfig.TTL must be >= 0", where)
	}
	return nil
}
