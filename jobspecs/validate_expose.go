package jobspecs

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/meshlet/meshlet/structs"
)

// checkExpose applies the rules of a group's expose paths and exposed
// checks (the per-check basics, http/grpc only and a connect sidecar, are
// in checkCheck): every expose path has a path, a protocol of http or
// http2 and a listener_port naming a port label of the group that
// neither the service nor its sidecar listens on; an exposed check's own
// port obeys the same, and the service's port inside the namespace must
// be known when the job is registered (a static port, `to`, a number or
// local_service_port).
func checkExpose(tg *structs.TaskGroup, p path, labels []string, report reporter) {
	for i, s := range tg.Services {
		if s == nil || !s.Connect.HasSidecar() {
			continue
		}
		sp := p.item("service", i, s.Name)
		busy := exposeBusyLabels(s)
		if px := s.Connect.SidecarService.Proxy; px != nil && px.Expose != nil {
			ep := sp.sub("connect").sub("sidecar_service").sub("proxy").sub("expose")
			checkExposePaths(px.Expose.Paths, ep, labels, busy, report)
		}
		portReported := false
		for j := range s.Checks {
			c := &s.Checks[j]
			if !c.Expose || (c.Type != "http" && c.Type != "grpc") {
				continue
			}
			cp := sp.item("check", j, c.Name)
			if c.Type == "http" && !strings.HasPrefix(c.Path, "/") {
				report(SeverityError, cp.attr("path"), "Invalid exposed check path",
					fmt.Sprintf("Check path %q must start with \"/\" to be exposed through the sidecar.", c.Path))
			}
			if c.PortLabel != "" {
				checkListenerLabel("Check port", c.PortLabel, cp.attr("port"), labels, busy, report)
			}
			if msg := exposeLocalPort(tg, s); msg != "" && !portReported {
				// Nomad's words, then why.
				report(SeverityError, cp.attr("expose"), "Invalid exposed check", fmt.Sprintf(
					"Unable to determine local service port for service check %s->%s->%s: %s", tg.Name, s.Name, c.Name, msg))
				portReported = true // once per service
			}
		}
	}
}

// exposeBusyLabels are the port labels an expose listener must not take:
// the service's (the app binds it) and the sidecar's public listener.
func exposeBusyLabels(s *structs.Service) []string {
	busy := []string{s.Connect.SidecarService.Port}
	if busy[0] == "" {
		busy[0] = "connect-proxy-" + s.Name
	}
	return append(busy, s.PortLabel)
}

func checkExposePaths(paths []*structs.ConsulExposePath, ep path, labels, busy []string, report reporter) {
	type key struct{ port, path string }
	seen := map[key]bool{}
	for i, xp := range paths {
		if xp == nil {
			continue
		}
		pp := ep.item("path", i, "")
		switch {
		case xp.Path == "":
			report(SeverityError, pp.attr("path"), "Missing expose path", `Every expose path needs a path, e.g. path = "/health".`)
		case !strings.HasPrefix(xp.Path, "/") || strings.ContainsAny(xp.Path, "?#"):
			report(SeverityError, pp.attr("path"), "Invalid expose path",
				fmt.Sprintf("Expose path %q must start with \"/\" and carry no query or fragment; it is matched exactly.", xp.Path))
		}
		switch xp.Protocol {
		case "", "http", "http2":
		default:
			report(SeverityError, pp.attr("protocol"), "Invalid expose protocol",
				fmt.Sprintf("Expose path %q: protocol %q is not valid; use \"http\" or \"http2\".", xp.Path, xp.Protocol))
		}
		if xp.ListenerPort == "" {
			report(SeverityError, pp.attr("listener_port"), "Missing expose listener_port",
				fmt.Sprintf("Expose path %q needs listener_port, the label of a group port the sidecar serves it on.", xp.Path))
			continue
		}
		checkListenerLabel("Expose listener_port", xp.ListenerPort, pp.attr("listener_port"), labels, busy, report)
		k := key{xp.ListenerPort, xp.Path}
		if seen[k] {
			report(SeverityError, pp, "Duplicate expose path",
				fmt.Sprintf("Path %q is exposed on listener_port %q more than once.", xp.Path, xp.ListenerPort))
		}
		seen[k] = true
	}
}

// checkListenerLabel: an expose listener's port is a group port label
// that neither the app nor the sidecar's public listener binds.
func checkListenerLabel(kind, label string, at path, labels, busy []string, report reporter) {
	switch {
	case strings.Contains(label, "${"):
	case !slices.Contains(labels, label):
		hint := ""
		if _, err := strconv.Atoi(label); err == nil {
			hint = " A number is not enough: the port must be mapped, so declare it as a port of the network block."
		}
		report(SeverityError, at, "Unknown expose port", fmt.Sprintf(
			"%s %q is not a port label of the group (%s).%s", kind, label, labelList(labels), hint))
	case slices.Contains(busy, label):
		report(SeverityError, at, "Invalid expose port", fmt.Sprintf(
			"%s %q is the port of the service or of its sidecar; the expose listener needs a port of its own, e.g. port \"health\" {} in the network block.", kind, label))
	}
}

// exposeLocalPort explains why the service's port inside the namespace
// is unknown at registration, or returns "".
func exposeLocalPort(tg *structs.TaskGroup, s *structs.Service) string {
	if px := s.Connect.SidecarService.Proxy; px != nil && px.LocalServicePort > 0 {
		return ""
	}
	if s.PortLabel == "" {
		return fmt.Sprintf("service %q has no port, so the exposed check has no local port to reach; set the service's port or proxy local_service_port.", s.Name)
	}
	if n, err := strconv.Atoi(s.PortLabel); err == nil && n > 0 {
		return ""
	}
	for _, n := range tg.Networks {
		if n == nil {
			continue
		}
		for _, pt := range n.ReservedPorts {
			if pt.Label == s.PortLabel {
				return ""
			}
		}
		for _, pt := range n.DynamicPorts {
			if pt.Label == s.PortLabel && pt.To <= 0 {
				return fmt.Sprintf("service port %q is dynamic without `to`, so the port the app listens on is only known once allocated; set `to` (or a static port) for the exposed check.", s.PortLabel)
			}
		}
	}
	return ""
}
