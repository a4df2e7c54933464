package jobspecs

import (
	"fmt"
	"slices"

	"github.com/hashicorp/hcl/v2/hclsyntax"

	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/structs"
)

// decodeGatewayTLS decodes an ingress gateway's or listener's tls block
// (Nomad's api.ConsulGatewayTLSConfig: enabled, tls_min_version,
// tls_max_version, cipher_suites, sds { cluster_name, cert_resource }).
func (d *decoder) decodeGatewayTLS(m map[string]any, p path, b *hclsyntax.Block) *structs.ConsulGatewayTLSConfig {
	d.recBlock(p, b)
	out := &structs.ConsulGatewayTLSConfig{}
	out.Enabled = d.gwBool(m, p, b, "enabled")
	out.TLSMinVersion, _ = d.gwString(m, p, b, "tls_min_version")
	out.TLSMaxVersion, _ = d.gwString(m, p, b, "tls_max_version")
	if cs, ok := m["cipher_suites"]; ok {
		d.recAttr(p, b, "cipher_suites")
		list, _ := cs.([]any)
		for _, c := range list {
			if s, ok := c.(string); ok {
				out.CipherSuites = append(out.CipherSuites, s)
			}
		}
		if len(list) != len(out.CipherSuites) || (cs != nil && list == nil) {
			key := p.attr("cipher_suites").key
			d.errAt(key, d.ranges[key], "Incorrect attribute value type", "Inappropriate value for attribute \"cipher_suites\": a list of strings is required.")
		}
	}
	if sm := firstMap(m["sds"]); sm != nil {
		sp := p.sub("sds")
		var sb *hclsyntax.Block
		if b != nil {
			sb = first(blocksByType(b.Body)["sds"])
		}
		d.recBlock(sp, sb)
		out.SDS = &structs.ConsulGatewayTLSSDSConfig{}
		out.SDS.ClusterName, _ = d.gwString(sm, sp, sb, "cluster_name")
		out.SDS.CertResource, _ = d.gwString(sm, sp, sb, "cert_resource")
	}
	return out
}

// checkGatewayTLS applies Consul's rules to a tls block: known versions,
// minimum not above maximum, known cipher suites and only below TLS 1.3,
// and an sds block names both its cluster and its certificate.
func checkGatewayTLS(t *structs.ConsulGatewayTLSConfig, p path, report reporter) {
	if t == nil {
		return
	}
	versions := map[string]int{"": 0, configentry.TLSVersionAuto: 0, configentry.TLSv10: 1, configentry.TLSv11: 2, configentry.TLSv12: 3, configentry.TLSv13: 4}
	minV, okMin := versions[t.TLSMinVersion]
	maxV, okMax := versions[t.TLSMaxVersion]
	const known = "use one of TLS_AUTO, TLSv1_0, TLSv1_1, TLSv1_2, TLSv1_3"
	if !okMin {
		report(SeverityError, p.attr("tls_min_version"), "Invalid TLS version", fmt.Sprintf("TLS version %q is not known; %s.", t.TLSMinVersion, known))
	}
	if !okMax {
		report(SeverityError, p.attr("tls_max_version"), "Invalid TLS version", fmt.Sprintf("TLS version %q is not known; %s.", t.TLSMaxVersion, known))
	}
	if okMin && okMax && minV > 0 && maxV > 0 && minV > maxV {
		report(SeverityError, p.attr("tls_min_version"), "Invalid TLS version",
			fmt.Sprintf("tls_min_version %s is above tls_max_version %s.", t.TLSMinVersion, t.TLSMaxVersion))
	}
	if len(t.CipherSuites) > 0 && t.TLSMinVersion == configentry.TLSv13 {
		report(SeverityError, p.attr("cipher_suites"), "Invalid cipher suites",
			"Configuring cipher_suites is only applicable to connections negotiated with TLS 1.2 or earlier; tls_min_version is TLSv1_3.")
	}
	for _, c := range t.CipherSuites {
		if _, ok := configentry.EnvoyCipherSuite(c); !ok {
			report(SeverityError, p.attr("cipher_suites"), "Invalid cipher suite", fmt.Sprintf("Cipher suite %q is not supported.", c))
		}
	}
	if t.SDS != nil && (t.SDS.ClusterName == "" || t.SDS.CertResource == "") {
		report(SeverityError, p.sub("sds"), "Incomplete TLS SDS configuration", "An sds block needs both cluster_name and cert_resource.")
	}
}

// checkListenerTLS checks what the gateway's tls block gives a listener
// (Consul's rules): no "*" host when the mesh CA's certificate must name
// every host. (Nomad's jobspec has no per-listener tls; the
// ingress-gateway entry written with `meshlet config write` has.)
func checkListenerTLS(gw *structs.ConsulGatewayTLSConfig, l *structs.ConsulIngressListener, lp path, report reporter) {
	if gw == nil || !gw.Enabled || gw.SDS != nil {
		return
	}
	for j, s := range l.Services {
		if s != nil && slices.Contains(s.Hosts, "*") {
			report(SeverityError, lp.item("service", j, s.Name).attr("hosts"), "Invalid ingress host",
				"Host \"*\" is not allowed when TLS is enabled: every host must be a valid DNS name to add as a DNS SAN of the gateway's certificate.")
		}
	}
}

// checkServiceTLS checks a listener's services' own tls blocks (Consul's
// service-level SDS): only an sds block, on an http, http2 or grpc
// listener, for a named service with hosts (its SNI names), with a
// cert_resource and a cluster_name (its own or the gateway's).
func checkServiceTLS(gw *structs.ConsulGatewayTLSConfig, l *structs.ConsulIngressListener, lp path, report reporter) {
	for j, s := range l.Services {
		if s == nil || s.TLS == nil {
			continue
		}
		tp := lp.item("service", j, s.Name).sub("tls")
		t := s.TLS
		switch {
		case t.Enabled || t.TLSMinVersion != "" || t.TLSMaxVersion != "" || len(t.CipherSuites) > 0:
			report(SeverityError, tp, "Invalid ingress service TLS", "A service's tls block takes only sds; versions and cipher suites are the gateway's.")
		case l.Protocol == ingressTCP || l.Protocol == "":
			report(SeverityError, tp, "Invalid ingress service TLS", "A service's own certificate is only valid on http, http2 and grpc listeners.")
		case t.SDS == nil || t.SDS.CertResource == "" || len(s.Hosts) == 0 || s.Name == "*":
			report(SeverityError, tp, "Invalid ingress service TLS",
				"A service's certificate from SDS needs sds { cert_resource } and hosts (its SNI names), and no wildcard service.")
		case t.SDS.ClusterName == "" && (gw == nil || gw.SDS == nil || gw.SDS.ClusterName == ""):
			report(SeverityError, tp.sub("sds"), "Invalid ingress service TLS", "No cluster_name, and none in the gateway's sds block to default to.")
		}
	}
}

// ingressServiceUnrun are the ingress service arguments Nomad accepts that
// meshlet does not run: header changes and service limits.
var ingressServiceUnrun = []string{"request_headers", "response_headers", "max_connections", "max_pending_requests", "max_concurrent_requests"}

// warnIngressServiceUnrun warns about each of them an ingress service
// block sets (as an argument or a block): it parses, and is ignored.
func (d *decoder) warnIngressServiceUnrun(b *hclsyntax.Block) {
	if b == nil {
		return
	}
	blocks := blocksByType(b.Body)
	for _, name := range ingressServiceUnrun {
		if a := b.Body.Attributes[name]; a != nil {
			d.add(SeverityWarning, a.NameRange, unsupportedMsg(name), "Nomad passes it to Consul; meshlet's ingress gateways do not apply it.")
		}
		for _, nb := range blocks[name] {
			d.add(SeverityWarning, nb.DefRange(), unsupportedMsg(name), "Nomad passes it to Consul; meshlet's ingress gateways do not apply it.")
		}
	}
}
