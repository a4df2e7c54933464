package jobspecs

import (
	"fmt"
	"slices"
	"strings"

	"github.com/meshlet/meshlet/internal/lazyre"
	"github.com/meshlet/meshlet/structs"
)

// Ingress listener protocols: tcp forwards bytes; http, http2 and grpc
// route by Host header.
const (
	ingressTCP  = "tcp"
	ingressHTTP = "http"
)

// canonicalizeIngress defaults each ingress listener's protocol to tcp, as
// Nomad's api package does.
func canonicalizeIngress(c *structs.ConsulConnect) {
	if !c.IsIngress() {
		return
	}
	for _, l := range c.Gateway.Ingress.Listeners {
		if l != nil {
			setDefault(&l.Protocol, ingressTCP)
		}
	}
}

// hasGateway reports whether a group has a gateway service: its task is
// injected at registration, so it needs none of its own.
func hasGateway(tg *structs.TaskGroup) bool {
	return slices.ContainsFunc(tg.Services, func(s *structs.Service) bool {
		return s != nil && s.Connect.IsGateway()
	})
}

// checkGateway applies Nomad's rules (ConsulGateway and
// ConsulIngressConfigEntry Validate) to a service's gateway block.
func checkGateway(s *structs.Service, c *structs.ConsulConnect, p path, report reporter) {
	g, gp := c.Gateway, p.sub("gateway")
	if c.SidecarService != nil || c.Native {
		report(SeverityError, gp, "Invalid connect gateway",
			"Consul Connect must be exclusively native, make use of a sidecar, or represent a Gateway.")
	}
	kinds := len(g.Kinds())
	switch {
	case kinds == 0:
		report(SeverityError, gp, "Missing gateway configuration",
			"One Consul Gateway Configuration must be set: ingress, terminating or mesh.")
		return
	case kinds > 1:
		report(SeverityError, gp, "Invalid gateway configuration",
			"Only one Consul Gateway Configuration may be set: ingress, terminating or mesh.")
		return
	}
	if g.Proxy != nil && g.Proxy.ConnectTimeout != nil && *g.Proxy.ConnectTimeout < 0 {
		report(SeverityError, gp.sub("proxy").attr("connect_timeout"), "Invalid connect_timeout",
			"connect_timeout must not be negative.")
	}
	checkGatewayProxy(g.Proxy, gp.sub("proxy"), report)
	if g.Terminating != nil {
		checkTerminating(g.Terminating, gp.sub("terminating"), report)
		return
	}
	if g.Mesh != nil {
		return // mesh {} has no settings
	}
	checkIngress(g.Ingress, gp.sub("ingress"), report)
}

func checkIngress(in *structs.ConsulIngressConfigEntry, p path, report reporter) {
	if len(in.Listeners) == 0 {
		report(SeverityError, p, "Missing ingress listener", "Consul Ingress Gateway requires at least one listener.")
		return
	}
	checkGatewayTLS(in.TLS, p.sub("tls"), report)
	ports := map[int]int{}
	for i, l := range in.Listeners {
		if l == nil {
			continue
		}
		lp := p.item("listener", i, "")
		if l.Port < 1 || l.Port > 65535 {
			report(SeverityError, lp.attr("port"), "Invalid ingress listener port",
				fmt.Sprintf("Consul Ingress Listener requires valid Port (1-65535), got %d.", l.Port))
		} else if prev, dup := ports[l.Port]; dup {
			report(SeverityError, lp.attr("port"), "Duplicate ingress listener port",
				fmt.Sprintf("Port %d is already used by listener #%d; each listener needs its own port.", l.Port, prev+1))
		} else {
			ports[l.Port] = i
		}
		checkIngressListener(l, lp, report)
		checkListenerTLS(in.TLS, l, lp, report)
		checkServiceTLS(in.TLS, l, lp, report)
	}
}

func checkIngressListener(l *structs.ConsulIngressListener, p path, report reporter) {
	switch l.Protocol {
	case "", ingressTCP, ingressHTTP, "http2", "grpc": // "": tcp once canonicalized
	default:
		report(SeverityError, p.attr("protocol"), "Invalid ingress listener protocol",
			fmt.Sprintf("Consul Ingress Listener requires protocol of tcp, http, http2, grpc, got %q.", l.Protocol))
		return
	}
	if len(l.Services) == 0 {
		report(SeverityError, p, "Missing ingress service", "Consul Ingress Listener requires one or more services.")
		return
	}
	tcp := l.Protocol == ingressTCP || l.Protocol == ""
	if tcp && len(l.Services) > 1 {
		report(SeverityError, p.item("service", 1, ""), "Too many ingress services", fmt.Sprintf(
			"A tcp listener routes to exactly one service; listener on port %d has %d. Use protocol \"http\" to route by Host header.",
			l.Port, len(l.Services)))
	}
	names, hosts := map[string]bool{}, map[string]bool{}
	for j, s := range l.Services {
		if s == nil {
			continue
		}
		sp := p.item("service", j, s.Name)
		switch {
		case s.Name == "":
			report(SeverityError, sp, "Missing ingress service name", "Consul Ingress Service requires a name.")
			continue
		case s.Name == "*" && tcp:
			report(SeverityError, sp.attr("name"), "Invalid ingress service name",
				fmt.Sprintf("Wildcard service name is only valid for protocol = \"http\" (listener on port %d).", l.Port))
			continue
		case s.Name == "*" && len(s.Hosts) > 0:
			report(SeverityError, sp.attr("hosts"), "Invalid ingress hosts", "Associating hosts to a wildcard service is not supported.")
			continue
		case s.Name == "*":
			names[s.Name] = true
			continue
		case names[s.Name]:
			report(SeverityError, sp.attr("name"), "Duplicate ingress service",
				fmt.Sprintf("Service %q is already routed by the listener on port %d.", s.Name, l.Port))
		default:
			checkName("Ingress service name", s.Name, sp.attr("name"), report)
		}
		names[s.Name] = true
		if tcp && len(s.Hosts) > 0 {
			report(SeverityError, sp.attr("hosts"), "Invalid ingress hosts",
				"Consul Ingress Service doesn't support associating hosts to a service for the tcp protocol.")
			continue
		}
		checkIngressHosts(s, l.Port, hosts, sp.attr("hosts"), report)
	}
}

// hostRE is a DNS name with an optional leading wildcard label, and an
// optional port (Consul's ingress host rules).
var hostRE = lazyre.New(`^(\*\.)?([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?\.)*[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?(:[0-9]{1,5})?$`)

func checkIngressHosts(s *structs.ConsulIngressService, port int, seen map[string]bool, p path, report reporter) {
	for _, h := range s.Hosts {
		switch {
		case h == "*":
			if len(s.Hosts) > 1 {
				report(SeverityError, p, "Invalid ingress host",
					fmt.Sprintf("Service %q: host \"*\" matches every host and cannot be listed with others.", s.Name))
			}
		case !hostRE.MatchString(h):
			report(SeverityError, p, "Invalid ingress host", fmt.Sprintf(
				"Service %q: host %q is not a valid DNS name; a wildcard is only allowed as the whole leftmost label (\"*.example.com\").", s.Name, h))
			continue
		}
		k := strings.ToLower(h)
		if seen[k] {
			report(SeverityError, p, "Duplicate ingress host",
				fmt.Sprintf("Hosts must be unique within a listener: %q is used twice on the listener on port %d.", h, port))
		}
		seen[k] = true
	}
}

// checkGatewayNetwork requires a gateway group to run in one bridge,
// cni/* or host network (or none: host): its connect_proxy task runs in
// the allocation's namespace, or the host's.
func checkGatewayNetwork(tg *structs.TaskGroup, p path, report reporter) {
	for i, s := range tg.Services {
		if s == nil || !s.Connect.IsGateway() || s.Connect.HasSidecar() { // a sidecar's own rule reports it
			continue
		}
		kind, title := "an ingress gateway", "Ingress gateway requires bridge, cni or host networking"
		if s.Connect.IsTerminating() {
			kind, title = "a terminating gateway", "Terminating gateway requires bridge, cni or host networking"
		} else if s.Connect.IsMesh() {
			kind, title = "a mesh gateway", "Mesh gateway requires bridge, cni or host networking"
		}
		found := "no network block"
		if len(tg.Networks) == 0 {
			return // host mode, as Nomad allows for gateways
		}
		if len(tg.Networks) == 1 && tg.Networks[0] != nil {
			mode := tg.Networks[0].Mode
			if mode == "" || mode == structs.NetworkModeHost || mode == structs.NetworkModeBridge ||
				(strings.HasPrefix(mode, structs.NetworkModeCNIPrefix) && validNetworkMode(mode)) {
				return
			}
			found = fmt.Sprintf("network mode %q", cmpOr(mode, structs.NetworkModeHost))
		} else if len(tg.Networks) > 1 {
			found = fmt.Sprintf("%d network blocks", len(tg.Networks))
		}
		report(SeverityError, p.item("service", i, s.Name).sub("connect"), title, fmt.Sprintf(
			"Service %q is %s, so group %q needs at most one network block, with mode \"bridge\", \"cni/<name>\" or \"host\"; found %s.",
			s.Name, kind, tg.Name, found))
		return
	}
}
