package configentry

import (
	"fmt"
	"strings"

	consul "github.com/hashicorp/consul/api"
)

// TLS versions of a gateway's tls block (Consul's types.TLSVersion).
const (
	TLSVersionAuto = "TLS_AUTO"
	TLSv10         = "TLSv1_0"
	TLSv11         = "TLSv1_1"
	TLSv12         = "TLSv1_2"
	TLSv13         = "TLSv1_3"
)

// tlsVersionOrder ranks the versions; TLS_AUTO and "" rank 0.
var tlsVersionOrder = map[string]int{"": 0, TLSVersionAuto: 0, TLSv10: 1, TLSv11: 2, TLSv12: 3, TLSv13: 4}

// envoyCipherSuites maps Consul's cipher suite names to Envoy's (OpenSSL)
// names, which Consul writes into the listener's tls_params.
var envoyCipherSuites = map[string]string{
	"TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256":       "ECDHE-ECDSA-AES128-GCM-SHA256",
	"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305":        "ECDHE-ECDSA-CHACHA20-POLY1305",
	"TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256": "ECDHE-ECDSA-CHACHA20-POLY1305",
	"TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256":         "ECDHE-RSA-AES128-GCM-SHA256",
	"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305":          "ECDHE-RSA-CHACHA20-POLY1305",
	"TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256":   "ECDHE-RSA-CHACHA20-POLY1305",
	"TLS_ECDHE_ECDSA_WITH_AES_128_CBC_SHA":          "ECDHE-ECDSA-AES128-SHA",
	"TLS_ECDHE_RSA_WITH_AES_128_CBC_SHA":            "ECDHE-RSA-AES128-SHA",
	"TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384":       "ECDHE-ECDSA-AES256-GCM-SHA384",
	"TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384":         "ECDHE-RSA-AES256-GCM-SHA384",
	"TLS_ECDHE_ECDSA_WITH_AES_256_CBC_SHA":          "ECDHE-ECDSA-AES256-SHA",
	"TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA":            "ECDHE-RSA-AES256-SHA",
}

// EnvoyCipherSuite returns Envoy's name of a Consul cipher suite name.
func EnvoyCipherSuite(name string) (string, bool) {
	s, ok := envoyCipherSuites[strings.ToUpper(name)]
	return s, ok
}

// ResolveIngressTLS merges a listener's tls block over the gateway's, as
// Consul does: enabled if either enables it; the listener's SDS fields
// (each on its own), versions and cipher suites win where set. nil: no TLS
// on the listener.
func ResolveIngressTLS(gw consul.GatewayTLSConfig, l *consul.GatewayTLSConfig) *consul.GatewayTLSConfig {
	out := gw
	if l != nil {
		out.Enabled = out.Enabled || l.Enabled
		if l.SDS != nil {
			sds := consul.GatewayTLSSDSConfig{ClusterName: l.SDS.ClusterName, CertResource: l.SDS.CertResource}
			if gw.SDS != nil {
				sds.ClusterName = orDefault(sds.ClusterName, gw.SDS.ClusterName)
				sds.CertResource = orDefault(sds.CertResource, gw.SDS.CertResource)
			}
			out.SDS = &sds
		}
		if l.TLSMinVersion != "" {
			out.TLSMinVersion = l.TLSMinVersion
		}
		if l.TLSMaxVersion != "" {
			out.TLSMaxVersion = l.TLSMaxVersion
		}
		if len(l.CipherSuites) > 0 {
			out.CipherSuites = l.CipherSuites
		}
	}
	if !out.Enabled && out.SDS == nil {
		return nil
	}
	return &out
}

// validateGatewayTLS applies Consul's rules to a tls block: known
// versions, min not above max, cipher suites only below TLS 1.3, both SDS
// fields once merged (complete: the listener's effective block).
func validateGatewayTLS(where string, t *consul.GatewayTLSConfig, complete bool) error {
	if t == nil {
		return nil
	}
	minV, okMin := tlsVersionOrder[t.TLSMinVersion]
	maxV, okMax := tlsVersionOrder[t.TLSMaxVersion]
	switch {
	case !okMin:
		return invalidf("%s.TLSMinVersion %q is not one of TLS_AUTO, TLSv1_0, TLSv1_1, TLSv1_2, TLSv1_3", where, t.TLSMinVersion)
	case !okMax:
		return invalidf("%s.TLSMaxVersion %q is not one of TLS_AUTO, TLSv1_0, TLSv1_1, TLSv1_2, TLSv1_3", where, t.TLSMaxVersion)
	case minV > 0 && maxV > 0 && minV > maxV:
		return invalidf("%s: TLSMinVersion %s is above TLSMaxVersion %s", where, t.TLSMinVersion, t.TLSMaxVersion)
	case len(t.CipherSuites) > 0 && t.TLSMinVersion == TLSv13:
		return invalidf("%s.CipherSuites: configuring cipher suites is only applicable to connections negotiated with TLS 1.2 or earlier, TLSMinVersion is TLSv1_3", where)
	}
	for _, c := range t.CipherSuites {
		if _, ok := EnvoyCipherSuite(c); !ok {
			return invalidf("%s.CipherSuites: %q is not a supported cipher suite", where, c)
		}
	}
	if complete && t.SDS != nil && (t.SDS.ClusterName == "" || t.SDS.CertResource == "") {
		return invalidf("%s.SDS: both ClusterName and CertResource are required", where)
	}
	return nil
}

// validateIngressTLS checks the gateway's and each listener's tls blocks
// and their merge; with TLS from the mesh CA every host becomes a DNS SAN,
// so "*" is refused (Consul's rule).
func validateIngressTLS(e *consul.IngressGatewayConfigEntry) error {
	if err := validateGatewayTLS("TLS", &e.TLS, false); err != nil {
		return err
	}
	for i := range e.Listeners {
		l := &e.Listeners[i]
		where := fmt.Sprintf("Listeners[%d].TLS", i)
		if err := validateGatewayTLS(where, l.TLS, false); err != nil {
			return err
		}
		eff := ResolveIngressTLS(e.TLS, l.TLS)
		if err := validateGatewayTLS(where, eff, true); err != nil {
			return err
		}
		for j, s := range l.Services {
			if s.TLS != nil && s.TLS.SDS != nil && s.TLS.SDS.ClusterName == "" && (eff == nil || eff.SDS == nil) {
				return invalidf("Listeners[%d].Services[%d].TLS.SDS: no ClusterName, and none on the listener or the gateway to default to", i, j)
			}
		}
		if eff == nil || eff.SDS != nil {
			continue
		}
		for j, s := range l.Services {
			for _, h := range s.Hosts {
				if h == "*" {
					return invalidf("Listeners[%d].Services[%d].Hosts: \"*\" is not allowed when TLS is enabled: every host must be a valid DNS name to add as a DNS SAN", i, j)
				}
			}
		}
	}
	return nil
}
