package configentry

import (
	"errors"
	"fmt"
	"strings"

	consul "github.com/hashicorp/consul/api"
)

// errSubset marks compile errors about an undefined subset (Check reports
// those itself, with the entry that names the subset).
var errSubset = errors.New("undefined subset")

// TargetID is Consul's target ID: "<subset>.<service>.default.default.<dc>",
// or "<service>.default.default.<dc>" without a subset.
func TargetID(service, subset, dc string) string {
	id := service + ".default.default." + dc
	if subset != "" {
		return subset + "." + id
	}
	return id
}

// maxChainDepth bounds splitter nesting and redirect hops.
const maxChainDepth = 32

type compiler struct {
	s       *Set
	dc      string
	chain   *Chain
	touched bool
	// splitting and resolving hold what is being expanded, for cycles.
	splitting []string
	resolving []string
	// failedOver holds the targets whose failover list is computed.
	failedOver map[string]bool
}

func (s *Set) compile(service, dc string) (*Chain, error) {
	c := &compiler{s: s, dc: dc, failedOver: map[string]bool{}}
	c.chain = &Chain{
		Service: service, Datacenter: dc, Protocol: s.protocol(service),
		Targets: map[string]*Target{},
	}
	if s.protocolSet(service) {
		c.touched = true
	}
	var err error
	if IsHTTP(c.chain.Protocol) {
		err = c.compileHTTP(service)
	} else {
		var splits []Split
		if splits, err = c.resolve(service, "", dc); err == nil {
			c.chain.Routes = []*Route{{Splits: splits}}
		}
	}
	if err != nil {
		return nil, err
	}
	c.chain.Default = !c.touched
	return c.chain, nil
}

// protocolSet reports whether an entry sets service's protocol.
func (s *Set) protocolSet(service string) bool {
	if sd, ok := s.Get(ServiceDefaults, service).(*consul.ServiceConfigEntry); ok && sd.Protocol != "" {
		return true
	}
	return s.globalProtocol() != ""
}

func (c *compiler) compileHTTP(service string) error {
	if r, ok := c.s.Get(ServiceRouter, service).(*consul.ServiceRouterConfigEntry); ok {
		c.touched = true
		for i := range r.Routes {
			route, err := c.route(service, &r.Routes[i])
			if err != nil {
				return fmt.Errorf("%w: service-router/%s Routes[%d]: %w", ErrConflict, service, i, unwrapConflict(err))
			}
			c.chain.Routes = append(c.chain.Routes, route)
		}
	}
	splits, err := c.split(service)
	if err != nil {
		return err
	}
	catchAll := &Route{Splits: splits}
	if r, ok := c.s.Get(ServiceResolver, service).(*consul.ServiceResolverConfigEntry); ok {
		catchAll.RequestTimeout = r.RequestTimeout
	}
	c.chain.Routes = append(c.chain.Routes, catchAll)
	return nil
}

// route compiles one router route: its match and destination.
func (c *compiler) route(service string, rt *consul.ServiceRoute) (*Route, error) {
	out := &Route{Match: &consul.ServiceRouteHTTPMatch{PathPrefix: "/"}}
	if rt.Match != nil && rt.Match.HTTP != nil {
		m := *rt.Match.HTTP
		if m.PathExact == "" && m.PathPrefix == "" && m.PathRegex == "" {
			m.PathPrefix = "/"
		}
		out.Match = &m
	}
	svc, subset := service, ""
	if d := rt.Destination; d != nil {
		svc, subset = orDefault(d.Service, service), d.ServiceSubset
		out.PrefixRewrite = d.PrefixRewrite
		out.RequestTimeout = d.RequestTimeout
		out.IdleTimeout = d.IdleTimeout
		out.NumRetries = d.NumRetries
		out.RetryOnConnectFailure = d.RetryOnConnectFailure
		out.RetryOnStatusCodes = append([]uint32(nil), d.RetryOnStatusCodes...)
		out.RetryOn = append([]string(nil), d.RetryOn...)
		out.RequestHeaders = d.RequestHeaders
		out.ResponseHeaders = d.ResponseHeaders
	}
	if out.RequestTimeout == 0 {
		if r, ok := c.s.Get(ServiceResolver, svc).(*consul.ServiceResolverConfigEntry); ok {
			out.RequestTimeout = r.RequestTimeout
		}
	}
	var err error
	if subset == "" {
		out.Splits, err = c.split(svc)
	} else {
		out.Splits, err = c.resolve(svc, subset, c.dc)
	}
	return out, err
}

// split expands service's splitter (or, without one, its resolver) into
// weighted targets; splits of splits multiply their weights and merge
// their header changes (nestSplitHeaders).
func (c *compiler) split(service string) ([]Split, error) {
	sp, ok := c.s.Get(ServiceSplitter, service).(*consul.ServiceSplitterConfigEntry)
	if !ok {
		return c.resolve(service, "", c.dc)
	}
	c.touched = true
	if contains(c.splitting, service) || len(c.splitting) >= maxChainDepth {
		return nil, fmt.Errorf("%w: splitter cycle: %s -> %s", ErrConflict, strings.Join(c.splitting, " -> "), service)
	}
	c.splitting = append(c.splitting, service)
	defer func() { c.splitting = c.splitting[:len(c.splitting)-1] }()

	var out []Split
	for _, s := range sp.Splits {
		if s.Weight <= 0 {
			continue
		}
		svc := orDefault(s.Service, service)
		var inner []Split
		var err error
		switch {
		case s.ServiceSubset != "":
			inner, err = c.resolve(svc, s.ServiceSubset, c.dc)
		case svc == service:
			inner, err = c.resolve(svc, "", c.dc)
		default:
			inner, err = c.split(svc)
		}
		if err != nil {
			return nil, err
		}
		for _, in := range inner {
			req, resp := nestSplitHeaders(s, in)
			out = addSplit(out, Split{Weight: s.Weight * in.Weight / 100, TargetID: in.TargetID, RequestHeaders: req, ResponseHeaders: resp})
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("%w: service-splitter/%s sends no traffic anywhere (every weight is 0)", ErrConflict, service)
	}
	return out, nil
}

// addSplit merges a split into splits, summing the weights of splits to
// the same target that change headers alike. Splits to one target with
// different header changes stay apart (Consul's weighted clusters of the
// same cluster), each with its own share of the traffic.
func addSplit(splits []Split, s Split) []Split {
	for i := range splits {
		if splits[i].TargetID == s.TargetID && sameHeaders(splits[i], s) {
			splits[i].Weight += s.Weight
			return splits
		}
	}
	return append(splits, s)
}

// resolve applies service's resolver to (subset, dc): redirect, default
// subset, failover; it returns one split of weight 100 to the target.
func (c *compiler) resolve(service, subset, dc string) ([]Split, error) {
	t, err := c.target(service, subset, dc)
	if err != nil {
		return nil, err
	}
	if !c.failedOver[t.ID] {
		c.failedOver[t.ID] = true
		if err := c.failover(t); err != nil {
			return nil, err
		}
	}
	return []Split{{Weight: 100, TargetID: t.ID}}, nil
}

// target follows service's resolver to one target: redirects, the default
// subset and the subset's filter (failover is resolve's).
func (c *compiler) target(service, subset, dc string) (*Target, error) {
	key := TargetID(service, subset, dc)
	if contains(c.resolving, key) || len(c.resolving) >= maxChainDepth {
		return nil, fmt.Errorf("%w: redirect cycle: %s -> %s", ErrConflict, strings.Join(c.resolving, " -> "), key)
	}
	c.resolving = append(c.resolving, key)
	defer func() { c.resolving = c.resolving[:len(c.resolving)-1] }()

	r, _ := c.s.Get(ServiceResolver, service).(*consul.ServiceResolverConfigEntry)
	if r == nil {
		if subset != "" {
			return nil, fmt.Errorf("%w: %w: subset %q of service %q is not defined (no service-resolver)", ErrConflict, errSubset, subset, service)
		}
		return c.addTarget(&Target{ID: key, Service: service, Datacenter: dc, ConnectTimeout: DefaultConnectTimeout}), nil
	}
	c.touched = true
	if rd := r.Redirect; rd != nil {
		next := orDefault(rd.Service, service)
		nextSubset := rd.ServiceSubset
		if nextSubset == "" && next == service {
			nextSubset = subset
		}
		// As in Consul, a redirect that leads back to this very target
		// (db redirected to dc2, resolved in dc2) is already applied.
		if nextDC := orDefault(rd.Datacenter, dc); TargetID(next, nextSubset, nextDC) != key {
			return c.target(next, nextSubset, nextDC)
		}
	}
	if subset == "" {
		subset = r.DefaultSubset
	}
	t := &Target{
		ID: TargetID(service, subset, dc), Service: service, Subset: subset, Datacenter: dc,
		ConnectTimeout: r.ConnectTimeout, LoadBalancer: r.LoadBalancer,
	}
	if t.ConnectTimeout == 0 {
		t.ConnectTimeout = DefaultConnectTimeout
	}
	if subset != "" {
		def, ok := r.Subsets[subset]
		if !ok {
			return nil, fmt.Errorf("%w: %w: subset %q of service %q is not defined by its service-resolver", ErrConflict, errSubset, subset, service)
		}
		t.Filter, t.OnlyPassing = def.Filter, def.OnlyPassing
	}
	return c.addTarget(t), nil
}

func (c *compiler) addTarget(t *Target) *Target {
	if prev, ok := c.chain.Targets[t.ID]; ok {
		return prev
	}
	c.chain.Targets[t.ID] = t
	return t
}

// failover fills t.Failover from its resolver's Failover entry for t's
// subset (or "*"); failover targets do not fail over further.
func (c *compiler) failover(t *Target) error {
	r, _ := c.s.Get(ServiceResolver, t.Service).(*consul.ServiceResolverConfigEntry)
	if r == nil {
		return nil
	}
	f, ok := r.Failover[t.Subset]
	if !ok || t.Subset == "" {
		if f, ok = r.Failover["*"]; !ok {
			return nil
		}
	}
	// As Consul rewrites a target for failover, a hop keeps t's subset
	// unless it names one or another service (whose default subset
	// applies); a hop that comes back to t itself is dropped.
	type hop struct{ svc, subset, dc string }
	newHop := func(svc, subset, dc string) hop {
		svc = orDefault(svc, t.Service)
		if subset == "" && svc == t.Service {
			subset = t.Subset
		}
		return hop{svc, subset, orDefault(dc, t.Datacenter)}
	}
	var hops []hop
	for _, ft := range f.Targets {
		hops = append(hops, newHop(ft.Service, ft.ServiceSubset, ft.Datacenter))
	}
	if len(f.Targets) == 0 {
		dcs := f.Datacenters
		if len(dcs) == 0 {
			dcs = []string{t.Datacenter}
		}
		for _, dc := range dcs {
			hops = append(hops, newHop(f.Service, f.ServiceSubset, dc))
		}
	}
	for _, h := range hops {
		ft, err := c.target(h.svc, h.subset, h.dc)
		if err != nil {
			return err
		}
		if ft.ID != t.ID && !contains(t.Failover, ft.ID) {
			t.Failover = append(t.Failover, ft.ID)
		}
	}
	return nil
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func unwrapConflict(err error) error {
	msg := strings.TrimPrefix(err.Error(), ErrConflict.Error()+": ")
	if errors.Is(err, errSubset) {
		return fmt.Errorf("%w: %s", errSubset, strings.TrimPrefix(msg, errSubset.Error()+": "))
	}
	return errors.New(msg)
}

// IntegerWeights turns splits' percentages into integers summing to
// exactly total (Envoy's weighted clusters: total 10000 for weight*100),
// by largest remainder, so rounding never breaks the sum.
func IntegerWeights(splits []Split, total uint32) []uint32 {
	out := make([]uint32, len(splits))
	if len(splits) == 0 {
		return out
	}
	var sum float64
	for _, s := range splits {
		sum += float64(s.Weight)
	}
	if sum <= 0 {
		out[0] = total
		return out
	}
	rem := make([]float64, len(splits))
	var given uint32
	for i, s := range splits {
		exact := float64(s.Weight) / sum * float64(total)
		out[i] = uint32(exact)
		rem[i] = exact - float64(out[i])
		given += out[i]
	}
	for ; given < total; given++ {
		best := 0
		for i := range rem {
			if rem[i] > rem[best] {
				best = i
			}
		}
		out[best]++
		rem[best] = -1
	}
	return out
}
