package jobspecs

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/meshlet/meshlet/structs"
)

// checkConnectGroup applies Nomad's group-wide connect rules that the
// per-service checks cannot see: a native service's port and task
// (structs.Service.Validate and groupConnectNativeValidate), and
// transparent_proxy's (groupConnectUpstreamsValidate): no network dns
// block unless no_dns, exclude_inbound_ports numbers or static port
// labels, and no other connect block in the group. transparent_proxy
// itself is not run yet: a warning says so.
func checkConnectGroup(tg *structs.TaskGroup, p path, report reporter) {
	var connects, tproxies []string
	var firstTP path
	for i, s := range tg.Services {
		if s == nil || s.Connect == nil {
			continue
		}
		sp := p.item("service", i, s.Name)
		connects = append(connects, s.Name)
		if s.Connect.Native {
			checkNative(tg, s, sp, report)
		}
		if !s.Connect.HasSidecar() || s.Connect.SidecarService.Proxy == nil || s.Connect.SidecarService.Proxy.TransparentProxy == nil {
			continue
		}
		tpp := sp.sub("connect").sub("sidecar_service").sub("proxy").sub("transparent_proxy")
		if len(tproxies) == 0 {
			firstTP = tpp
		}
		tproxies = append(tproxies, s.Name)
		report(SeverityWarning, tpp, unsupportedMsg("transparent_proxy"), "")
		checkTransparentProxy(tg, s.Connect.SidecarService.Proxy.TransparentProxy, tpp, report)
	}
	if len(tproxies) > 0 && len(connects) > 1 {
		report(SeverityError, firstTP, "Invalid transparent_proxy", fmt.Sprintf(
			"Consul Connect transparent proxy requires there is only one connect block; group %q has %d (services %s).",
			tg.Name, len(connects), strings.Join(connects, ", ")))
	}
}

// checkNative: Consul refuses a native service without a port, and the
// service's task must be named unless the group has only one.
func checkNative(tg *structs.TaskGroup, s *structs.Service, sp path, report reporter) {
	if s.PortLabel == "" {
		report(SeverityError, sp.sub("connect").attr("native"), "Invalid connect native service",
			fmt.Sprintf("Service %q is Connect Native and requires setting the port.", s.Name))
	}
	if s.TaskName == "" && len(tg.Tasks) > 1 {
		report(SeverityError, sp.sub("connect").attr("native"), "Invalid connect native service", fmt.Sprintf(
			"Task for Consul Connect Native service %s->%s is ambiguous and must be set (service task = \"...\").", tg.Name, s.Name))
	}
}

func checkTransparentProxy(tg *structs.TaskGroup, tp *structs.ConsulTransparentProxy, p path, report reporter) {
	for _, n := range tg.Networks {
		if n != nil && n.DNS != nil && len(n.DNS.Servers)+len(n.DNS.Searches)+len(n.DNS.Options) > 0 && !tp.NoDNS {
			report(SeverityError, p, "Invalid transparent_proxy",
				"Consul Connect transparent proxy cannot be used with network.dns unless no_dns=true.")
			break
		}
	}
	for _, label := range tp.ExcludeInboundPorts {
		if !staticPortRef(tg, label) {
			report(SeverityError, p.attr("exclude_inbound_ports"), "Invalid transparent_proxy", fmt.Sprintf(
				"Consul Connect transparent proxy port %q must be numeric or one of network.port labels (a static port).", label))
		}
	}
}

// staticPortRef: a port number, or the label of a static port (Nomad's
// transparentProxyPortLabelValidate).
func staticPortRef(tg *structs.TaskGroup, label string) bool {
	if _, err := strconv.ParseUint(label, 10, 16); err == nil {
		return true
	}
	for _, n := range tg.Networks {
		if n == nil {
			continue
		}
		for _, pt := range n.ReservedPorts {
			if pt.Label == label {
				return true
			}
		}
	}
	return false
}
