package configentry

import (
	"errors"
	"fmt"
	"strings"

	consul "github.com/hashicorp/consul/api"
)

// Referential checks, as Consul runs at write time: a set of entries is
// consistent when every router and splitter belongs to an HTTP service,
// every subset a router, splitter, redirect or failover names is defined
// by its service's resolver, the services of one chain share a protocol
// and every chain compiles (no redirect or splitter cycle).
//
// check and checkDelete compare the problems of the set after the change
// with those before it: a change is refused only for what it breaks, so a
// set that was written inconsistently (before checks existed) does not
// block unrelated writes.

// protocol is a service's protocol: its service-defaults, else
// proxy-defaults' Config["protocol"], else tcp.
func (s *Set) protocol(service string) string {
	if sd, ok := s.Get(ServiceDefaults, service).(*consul.ServiceConfigEntry); ok && sd.Protocol != "" {
		return strings.ToLower(sd.Protocol)
	}
	if p := s.globalProtocol(); p != "" {
		return p
	}
	return ProtocolTCP
}

func (s *Set) globalProtocol() string {
	pd, ok := s.Get(ProxyDefaults, GlobalName).(*consul.ProxyConfigEntry)
	if !ok {
		return ""
	}
	for k, v := range pd.Config {
		if strings.EqualFold(k, "protocol") {
			if p, ok := v.(string); ok {
				return strings.ToLower(p)
			}
		}
	}
	return ""
}

func (s *Set) check(e Entry) error {
	if err := validate(e); err != nil {
		return err
	}
	next := s.With(e)
	if err := newProblem(s, next); err != "" {
		return fmt.Errorf("%w: writing %s: %s", ErrConflict, KeyOf(e), err)
	}
	return nil
}

func (s *Set) checkDelete(k Key) error {
	if s.Get(k.Kind, k.Name) == nil {
		return nil
	}
	next := s.Without(k)
	if err := newProblem(s, next); err != "" {
		return fmt.Errorf("%w: deleting %s: %s", ErrConflict, k, err)
	}
	return nil
}

// newProblem returns the first problem of next that prev does not have.
func newProblem(prev, next *Set) string {
	old := map[string]bool{}
	for _, p := range prev.problems() {
		old[p] = true
	}
	for _, p := range next.problems() {
		if !old[p] {
			return p
		}
	}
	return ""
}

// problems lists every referential inconsistency of s, most basic first
// (protocols, then subsets, then whole chains), in a stable order.
func (s *Set) problems() []string {
	if s == nil {
		return nil
	}
	s.problemsOnce.Do(func() { s.problemsList = s.findProblems() })
	return s.problemsList
}

func (s *Set) findProblems() []string {
	var out []string
	add := func(format string, args ...any) { out = append(out, fmt.Sprintf(format, args...)) }
	routers, splitters, resolvers := s.List(ServiceRouter), s.List(ServiceSplitter), s.List(ServiceResolver)
	for _, e := range append(append([]Entry(nil), routers...), splitters...) {
		s.needHTTP(add, KeyOf(e), e.GetName())
	}
	for _, e := range routers {
		r := e.(*consul.ServiceRouterConfigEntry)
		for i, rt := range r.Routes {
			svc, subset := r.Name, ""
			if d := rt.Destination; d != nil {
				svc, subset = orDefault(d.Service, r.Name), d.ServiceSubset
			}
			where := fmt.Sprintf("%s Routes[%d]", KeyOf(r), i)
			s.needSameProtocol(add, where, r.Name, svc)
			s.needSubset(add, where, svc, subset)
		}
	}
	for _, e := range splitters {
		sp := e.(*consul.ServiceSplitterConfigEntry)
		for i, split := range sp.Splits {
			if split.Weight == 0 {
				continue // dropped at compile: it may name anything
			}
			svc := orDefault(split.Service, sp.Name)
			where := fmt.Sprintf("%s Splits[%d]", KeyOf(sp), i)
			s.needSameProtocol(add, where, sp.Name, svc)
			s.needSubset(add, where, svc, split.ServiceSubset)
		}
	}
	for _, e := range resolvers {
		s.resolverProblems(add, e.(*consul.ServiceResolverConfigEntry))
	}
	for _, e := range s.List(IngressGateway) {
		s.ingressProblems(add, e.(*consul.IngressGatewayConfigEntry))
	}
	services := map[string]bool{}
	for _, e := range append(append(routers, splitters...), resolvers...) {
		services[e.GetName()] = true
	}
	for _, svc := range sortedKeys(services) {
		if _, err := s.compile(svc, "dc"); err != nil && !errors.Is(err, errSubset) {
			add("chain of %q: %s", svc, strings.TrimPrefix(err.Error(), ErrConflict.Error()+": "))
		}
	}
	return out
}

func (s *Set) resolverProblems(add func(string, ...any), r *consul.ServiceResolverConfigEntry) {
	if rd := r.Redirect; rd != nil && rd.Service != "" {
		where := fmt.Sprintf("%s Redirect", KeyOf(r))
		s.needSameProtocol(add, where, r.Name, rd.Service)
		s.needSubset(add, where, rd.Service, rd.ServiceSubset)
	}
	for _, key := range sortedKeys(r.Failover) {
		f := r.Failover[key]
		where := fmt.Sprintf("%s Failover[%q]", KeyOf(r), key)
		if f.Service != "" {
			s.needSameProtocol(add, where, r.Name, f.Service)
			s.needSubset(add, where, f.Service, f.ServiceSubset)
		}
		for i, t := range f.Targets {
			if t.Service == "" {
				continue // a subset of this resolver: validated already
			}
			tw := fmt.Sprintf("%s.Targets[%d]", where, i)
			s.needSameProtocol(add, tw, r.Name, t.Service)
			s.needSubset(add, tw, t.Service, t.ServiceSubset)
		}
	}
}

func (s *Set) needHTTP(add func(string, ...any), k Key, svc string) {
	if p := s.protocol(svc); !IsHTTP(p) {
		add("%s needs service %q to speak http, http2 or grpc, but its protocol is %q (set it with a service-defaults or proxy-defaults entry)", k, svc, p)
	}
}

func (s *Set) needSameProtocol(add func(string, ...any), where, from, to string) {
	if from == to {
		return
	}
	if a, b := s.protocol(from), s.protocol(to); a != b {
		add("%s: service %q has protocol %q but %q has %q (a chain's services must share one protocol)", where, to, b, from, a)
	}
}

func (s *Set) needSubset(add func(string, ...any), where, svc, subset string) {
	if subset == "" {
		return
	}
	r, ok := s.Get(ServiceResolver, svc).(*consul.ServiceResolverConfigEntry)
	if !ok {
		add("%s: subset %q of service %q is not defined (no service-resolver for %q)", where, subset, svc, svc)
		return
	}
	if _, ok := r.Subsets[subset]; !ok {
		add("%s: subset %q of service %q is not defined by its service-resolver (it has %s)", where, subset, svc, subsetList(r))
	}
}

func subsetList(r *consul.ServiceResolverConfigEntry) string {
	names := sortedKeys(r.Subsets)
	if len(names) == 0 {
		return "no subsets"
	}
	return strings.Join(names, ", ")
}

func orDefault(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
