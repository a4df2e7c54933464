package connect

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/meshlet/meshlet/structs"
)

// Expose path protocols.
const (
	ExposeHTTP  = "http"
	ExposeHTTP2 = "http2"
)

// ExposeCheckPortLabel is the label of the dynamic port an exposed check
// gets when it names none, as Nomad generates it: "svc_<service>_ck_<hash>",
// the hash taken over the check and its index in the service, so the label
// is stable across registrations of the same jobspec.
func ExposeCheckPortLabel(service string, index int, c *structs.ServiceCheck) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s_%d\x00%s\x00%s\x00%s\x00%s", service, index, c.Name, c.Type, c.Path, c.Protocol)
	return fmt.Sprintf("svc_%s_ck_%s", service, hex.EncodeToString(h.Sum(nil))[:6])
}

// GRPCHealthPath is the HTTP/2 path of grpc.health.v1's Check method: an
// exposed grpc check's expose path, as Consul exposes grpc checks.
const GRPCHealthPath = "/grpc.health.v1.Health/Check"

// CheckExposable reports whether an expose = true check gets an expose
// path: an http check with a path starting with "/" (Nomad's rule), or a
// grpc check (GRPCHealthPath over HTTP/2, Consul's rule: meshlet's grpc
// checks have no path).
func CheckExposable(c *structs.ServiceCheck) bool {
	switch strings.ToLower(c.Type) {
	case "http":
		return strings.HasPrefix(c.Path, "/")
	case "grpc":
		return true
	}
	return false
}

// exposeChecks turns every exposed check of the group's connect services
// into an expose path of the service's sidecar, as Nomad's expose-check
// hook does: a check without a port gets a new dynamic port
// (ExposeCheckPortLabel) and targets it, so the check reaches the app
// through the sidecar's expose listener; the path forwards to the
// service's port inside the namespace. It is idempotent.
func exposeChecks(tg *structs.TaskGroup) error {
	for _, s := range tg.Services {
		if !s.Connect.HasSidecar() {
			continue
		}
		for i := range s.Checks {
			c := &s.Checks[i]
			if !c.Expose || !CheckExposable(c) {
				continue
			}
			xp, err := exposePathForCheck(tg, s, c, i)
			if err != nil {
				return err
			}
			cfg := serviceExposeConfig(s)
			if !slices.ContainsFunc(cfg.Paths, func(p *structs.ConsulExposePath) bool { return p != nil && *p == *xp }) {
				cfg.Paths = append(cfg.Paths, xp)
			}
		}
	}
	return nil
}

func exposePathForCheck(tg *structs.TaskGroup, s *structs.Service, c *structs.ServiceCheck, i int) (*structs.ConsulExposePath, error) {
	local, err := localServicePort(tg, s)
	if err != nil {
		return nil, fmt.Errorf("%w: group %q service %q check %q: expose = true: %w", ErrInvalid, tg.Name, s.Name, c.Name, err)
	}
	if c.PortLabel == "" {
		c.PortLabel = ExposeCheckPortLabel(s.Name, i, c)
		ensureDynamicPort(tg.Networks[0], c.PortLabel)
	}
	// The route matches the path without its query, as Envoy does.
	path, _, _ := strings.Cut(c.Path, "?")
	xp := &structs.ConsulExposePath{Path: path, Protocol: ExposeHTTP, LocalPathPort: local, ListenerPort: c.PortLabel}
	if strings.EqualFold(c.Type, "grpc") {
		xp.Path, xp.Protocol = GRPCHealthPath, ExposeHTTP2
	}
	return xp, nil
}

// localServicePort is the port the service listens on inside the
// namespace: the proxy's local_service_port, else the service port's `to`,
// a static port without `to`, or a number. A dynamic port without `to` is
// only known once allocated, too late for the expose path.
func localServicePort(tg *structs.TaskGroup, s *structs.Service) (int, error) {
	if px := s.Connect.SidecarService.Proxy; px != nil && px.LocalServicePort > 0 {
		return px.LocalServicePort, nil
	}
	if p, ok := groupPort(tg, s.PortLabel); ok {
		switch {
		case p.To > 0:
			return p.To, nil
		case p.Value > 0:
			return p.Value, nil
		}
		return 0, fmt.Errorf("service port %q is dynamic without `to`, so its port inside the namespace is unknown; set `to`", s.PortLabel)
	}
	if n, err := strconv.Atoi(s.PortLabel); err == nil && n > 0 && n <= 65535 {
		return n, nil
	}
	return 0, fmt.Errorf("service port %q is neither a port label of the group nor a port number", s.PortLabel)
}

// groupPort finds a port of the group's network by label.
func groupPort(tg *structs.TaskGroup, label string) (structs.Port, bool) {
	if label == "" {
		return structs.Port{}, false
	}
	for _, n := range tg.Networks {
		if n == nil {
			continue
		}
		for _, p := range append(slices.Clone(n.ReservedPorts), n.DynamicPorts...) {
			if p.Label == label {
				return p, true
			}
		}
	}
	return structs.Port{}, false
}

// serviceExposeConfig returns the service's sidecar expose block, made on
// demand.
func serviceExposeConfig(s *structs.Service) *structs.ConsulExposeConfig {
	ss := s.Connect.SidecarService
	if ss.Proxy == nil {
		ss.Proxy = &structs.ConsulProxy{}
	}
	if ss.Proxy.Expose == nil {
		ss.Proxy.Expose = &structs.ConsulExposeConfig{}
	}
	return ss.Proxy.Expose
}
