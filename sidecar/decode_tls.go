package sidecar

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/proto"
)

// Well-known names and type URLs of the transport socket we implement.
const (
	tlsTransportSocket   = "envoy.transport_sockets.tls"
	rawBufferSocket      = "envoy.transport_sockets.raw_buffer"
	typeDownstreamTLS    = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.DownstreamTlsContext"
	typeUpstreamTLS      = "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext"
	typeRawBufferSocket  = "type.googleapis.com/envoy.extensions.transport_sockets.raw_buffer.v3.RawBuffer"
	redactedSecretMarker = "[redacted]"
)

// secret is a decoded SDS Secret: a certificate, a validation context, or
// (unused by meshlet) something else we keep only for config_dump.
type secret struct {
	name string
	cert *tls.Certificate // tls_certificate, Leaf parsed
	// validation context:
	roots *x509.CertPool
	sans  []sanMatcher
}

// certSource says where a TLS context's own certificate comes from: an SDS
// secret looked up at handshake time, or an inline certificate.
type certSource struct {
	sds    string
	inline *tls.Certificate
}

// validationSource says how to verify the peer: roots and SAN matchers given
// inline (validation_context or combined default_validation_context) and/or
// an SDS secret whose values take precedence when set.
type validationSource struct {
	sds   string
	roots *x509.CertPool
	sans  []sanMatcher
}

// tlsSettings is a decoded CommonTlsContext.
type tlsSettings struct {
	cert       *certSource       // nil: present no certificate
	validation *validationSource // nil: do not verify the peer
	minVersion uint16
	maxVersion uint16
	ciphers    []uint16 // TLS 1.2 suites; nil: Go's defaults
	alpn       []string
}

// secretNames returns the SDS secrets these settings need.
func (s *tlsSettings) secretNames() []string {
	var names []string
	if s == nil {
		return nil
	}
	if s.cert != nil && s.cert.sds != "" {
		names = append(names, s.cert.sds)
	}
	if s.validation != nil && s.validation.sds != "" {
		names = append(names, s.validation.sds)
	}
	return names
}

type downstreamTLS struct {
	tlsSettings
	requireClientCert bool
}

type upstreamTLS struct {
	tlsSettings
	sni string
}

func decodeSecret(s *tlsv3.Secret) (*secret, error) {
	if s.GetName() == "" {
		return nil, errors.New("secret has no name")
	}
	out := &secret{name: s.GetName()}
	switch t := s.GetType().(type) {
	case *tlsv3.Secret_TlsCertificate:
		cert, err := decodeTLSCertificate(t.TlsCertificate)
		if err != nil {
			return nil, fmt.Errorf("secret %q: %w", s.GetName(), err)
		}
		out.cert = cert
	case *tlsv3.Secret_ValidationContext:
		roots, sans, err := decodeValidationContext(t.ValidationContext)
		if err != nil {
			return nil, fmt.Errorf("secret %q: %w", s.GetName(), err)
		}
		if roots == nil {
			return nil, fmt.Errorf("secret %q: validation_context has no trusted_ca", s.GetName())
		}
		out.roots, out.sans = roots, sans
	default:
		return nil, fmt.Errorf("secret %q: type %T is not supported (want tls_certificate or validation_context)", s.GetName(), t)
	}
	return out, nil
}

func decodeTLSCertificate(c *tlsv3.TlsCertificate) (*tls.Certificate, error) {
	chain, err := readDataSource(c.GetCertificateChain())
	if err != nil {
		return nil, fmt.Errorf("certificate_chain: %w", err)
	}
	key, err := readDataSource(c.GetPrivateKey())
	if err != nil {
		return nil, fmt.Errorf("private_key: %w", err)
	}
	pair, err := tls.X509KeyPair(chain, key)
	if err != nil {
		return nil, fmt.Errorf("failed to parse certificate and key: %w", err)
	}
	if pair.Leaf == nil {
		leaf, err := x509.ParseCertificate(pair.Certificate[0])
		if err != nil {
			return nil, fmt.Errorf("failed to parse leaf certificate: %w", err)
		}
		pair.Leaf = leaf
	}
	return &pair, nil
}

// decodeValidationContext returns the trusted roots (nil when trusted_ca is
// unset) and SAN matchers of a CertificateValidationContext.
func decodeValidationContext(v *tlsv3.CertificateValidationContext) (*x509.CertPool, []sanMatcher, error) {
	if v == nil {
		return nil, nil, nil
	}
	if v.GetTrustChainVerification() == tlsv3.CertificateValidationContext_ACCEPT_UNTRUSTED {
		return nil, nil, errors.New("trust_chain_verification ACCEPT_UNTRUSTED is not supported")
	}
	var roots *x509.CertPool
	if v.GetTrustedCa() != nil {
		pemBytes, err := readDataSource(v.GetTrustedCa())
		if err != nil {
			return nil, nil, fmt.Errorf("trusted_ca: %w", err)
		}
		roots = x509.NewCertPool()
		if !roots.AppendCertsFromPEM(pemBytes) {
			return nil, nil, errors.New("trusted_ca holds no PEM certificate")
		}
	}
	var sans []sanMatcher
	for i, m := range v.GetMatchTypedSubjectAltNames() {
		sm, err := decodeStringMatcher(m.GetMatcher())
		if err != nil {
			return nil, nil, fmt.Errorf("match_typed_subject_alt_names[%d]: %w", i, err)
		}
		kind, ok := map[tlsv3.SubjectAltNameMatcher_SanType]sanType{
			tlsv3.SubjectAltNameMatcher_DNS:        sanDNS,
			tlsv3.SubjectAltNameMatcher_URI:        sanURI,
			tlsv3.SubjectAltNameMatcher_EMAIL:      sanEmail,
			tlsv3.SubjectAltNameMatcher_IP_ADDRESS: sanIP,
		}[m.GetSanType()]
		if !ok {
			return nil, nil, fmt.Errorf("match_typed_subject_alt_names[%d]: san_type %s is not supported", i, m.GetSanType())
		}
		sans = append(sans, sanMatcher{kind: kind, m: sm})
	}
	//lint:ignore SA1019 deprecated, but older control planes (Consul < 1.13) still emit it
	for i, m := range v.GetMatchSubjectAltNames() {
		sm, err := decodeStringMatcher(m)
		if err != nil {
			return nil, nil, fmt.Errorf("match_subject_alt_names[%d]: %w", i, err)
		}
		sans = append(sans, sanMatcher{kind: sanAny, m: sm})
	}
	return roots, sans, nil
}

// readDataSource returns the bytes of an inline or file DataSource.
func readDataSource(d *corev3.DataSource) ([]byte, error) {
	switch s := d.GetSpecifier().(type) {
	case *corev3.DataSource_InlineBytes:
		return s.InlineBytes, nil
	case *corev3.DataSource_InlineString:
		return []byte(s.InlineString), nil
	case *corev3.DataSource_Filename:
		b, err := os.ReadFile(s.Filename)
		if err != nil {
			return nil, fmt.Errorf("failed to read %s: %w", s.Filename, err)
		}
		return b, nil
	case nil:
		return nil, errors.New("data source is empty")
	default:
		return nil, fmt.Errorf("data source %T is not supported", s)
	}
}

// checkConfigSource accepts the config sources meshlet's control plane uses
// for SDS/EDS/RDS: ADS (and "self", the same stream for us).
func checkConfigSource(cs *corev3.ConfigSource) error {
	switch cs.GetConfigSourceSpecifier().(type) {
	case *corev3.ConfigSource_Ads, *corev3.ConfigSource_Self:
		return nil
	case nil:
		return errors.New("config source is empty (want ads)")
	case *corev3.ConfigSource_ApiConfigSource:
		return errors.New("an external SDS server (api_config_source) is not supported by the built-in proxy; use Envoy, or TLS from the mesh CA")
	default:
		return fmt.Errorf("config source %T is not supported (want ads)", cs.GetConfigSourceSpecifier())
	}
}

func decodeSdsConfig(field string, c *tlsv3.SdsSecretConfig) (string, error) {
	if c.GetName() == "" {
		return "", fmt.Errorf("%s: secret name is empty", field)
	}
	if err := checkConfigSource(c.GetSdsConfig()); err != nil {
		return "", fmt.Errorf("%s %q: %w", field, c.GetName(), err)
	}
	return c.GetName(), nil
}

// decodeCommonTLS decodes a CommonTlsContext.
func decodeCommonTLS(c *tlsv3.CommonTlsContext) (tlsSettings, error) {
	var out tlsSettings
	if c == nil {
		return out, nil
	}
	switch {
	case len(c.GetTlsCertificates())+len(c.GetTlsCertificateSdsSecretConfigs()) > 1:
		return out, errors.New("more than one certificate is not supported")
	case len(c.GetTlsCertificates()) == 1:
		cert, err := decodeTLSCertificate(c.GetTlsCertificates()[0])
		if err != nil {
			return out, fmt.Errorf("tls_certificates[0]: %w", err)
		}
		out.cert = &certSource{inline: cert}
	case len(c.GetTlsCertificateSdsSecretConfigs()) == 1:
		name, err := decodeSdsConfig("tls_certificate_sds_secret_configs[0]", c.GetTlsCertificateSdsSecretConfigs()[0])
		if err != nil {
			return out, err
		}
		out.cert = &certSource{sds: name}
	}
	v, err := decodeValidationSource(c)
	if err != nil {
		return out, err
	}
	out.validation = v
	p := c.GetTlsParams()
	if out.minVersion, err = tlsVersion(p.GetTlsMinimumProtocolVersion(), tls.VersionTLS12); err != nil {
		return out, err
	}
	if out.maxVersion, err = tlsVersion(p.GetTlsMaximumProtocolVersion(), tls.VersionTLS13); err != nil {
		return out, err
	}
	if out.minVersion > out.maxVersion {
		return out, errors.New("tls_params: minimum protocol version is above the maximum")
	}
	if out.ciphers, err = cipherSuites(p.GetCipherSuites()); err != nil {
		return out, err
	}
	out.alpn = c.GetAlpnProtocols()
	return out, nil
}

func decodeValidationSource(c *tlsv3.CommonTlsContext) (*validationSource, error) {
	switch v := c.GetValidationContextType().(type) {
	case nil:
		return nil, nil
	case *tlsv3.CommonTlsContext_ValidationContext:
		roots, sans, err := decodeValidationContext(v.ValidationContext)
		if err != nil {
			return nil, fmt.Errorf("validation_context: %w", err)
		}
		if roots == nil {
			return nil, errors.New("validation_context: trusted_ca is required")
		}
		return &validationSource{roots: roots, sans: sans}, nil
	case *tlsv3.CommonTlsContext_ValidationContextSdsSecretConfig:
		name, err := decodeSdsConfig("validation_context_sds_secret_config", v.ValidationContextSdsSecretConfig)
		if err != nil {
			return nil, err
		}
		return &validationSource{sds: name}, nil
	case *tlsv3.CommonTlsContext_CombinedValidationContext:
		cv := v.CombinedValidationContext
		roots, sans, err := decodeValidationContext(cv.GetDefaultValidationContext())
		if err != nil {
			return nil, fmt.Errorf("combined_validation_context: %w", err)
		}
		name, err := decodeSdsConfig("combined_validation_context.validation_context_sds_secret_config", cv.GetValidationContextSdsSecretConfig())
		if err != nil {
			return nil, err
		}
		return &validationSource{sds: name, roots: roots, sans: sans}, nil
	default:
		return nil, fmt.Errorf("validation context %T is not supported", v)
	}
}

func tlsVersion(v tlsv3.TlsParameters_TlsProtocol, auto uint16) (uint16, error) {
	switch v {
	case tlsv3.TlsParameters_TLS_AUTO:
		return auto, nil
	case tlsv3.TlsParameters_TLSv1_2:
		return tls.VersionTLS12, nil
	case tlsv3.TlsParameters_TLSv1_3:
		return tls.VersionTLS13, nil
	default:
		return 0, fmt.Errorf("tls_params: protocol version %s is not supported (TLS 1.2 or later)", v)
	}
}

// decodeTransportSocket returns the TLS context packed in a transport
// socket; msg is the DownstreamTlsContext or UpstreamTlsContext to fill.
// It returns false for a nil or raw_buffer socket (plaintext).
func decodeTransportSocket(ts *corev3.TransportSocket, wantType string, into proto.Message) (bool, error) {
	if ts == nil {
		return false, nil
	}
	typed := ts.GetTypedConfig()
	if typed == nil {
		if ts.GetName() == rawBufferSocket {
			return false, nil
		}
		return false, fmt.Errorf("transport socket %q has no typed_config", ts.GetName())
	}
	switch typed.GetTypeUrl() {
	case typeRawBufferSocket:
		return false, nil
	case wantType:
	default:
		return false, fmt.Errorf("transport socket %q: type %s is not supported (want %s)", ts.GetName(), typed.GetTypeUrl(), wantType)
	}
	if err := unmarshalAny(typed, into); err != nil {
		return false, fmt.Errorf("transport socket %q: %w", ts.GetName(), err)
	}
	return true, nil
}

func decodeDownstreamTLS(ts *corev3.TransportSocket) (*downstreamTLS, error) {
	ctx := &tlsv3.DownstreamTlsContext{}
	ok, err := decodeTransportSocket(ts, typeDownstreamTLS, ctx)
	if err != nil || !ok {
		return nil, err
	}
	common, err := decodeCommonTLS(ctx.GetCommonTlsContext())
	if err != nil {
		return nil, fmt.Errorf("downstream tls: %w", err)
	}
	if common.cert == nil {
		return nil, errors.New("downstream tls: a server certificate is required")
	}
	out := &downstreamTLS{tlsSettings: common, requireClientCert: ctx.GetRequireClientCertificate().GetValue()}
	if out.requireClientCert && out.validation == nil {
		return nil, errors.New("downstream tls: require_client_certificate needs a validation context")
	}
	return out, nil
}

func decodeUpstreamTLS(ts *corev3.TransportSocket) (*upstreamTLS, error) {
	ctx := &tlsv3.UpstreamTlsContext{}
	ok, err := decodeTransportSocket(ts, typeUpstreamTLS, ctx)
	if err != nil || !ok {
		return nil, err
	}
	common, err := decodeCommonTLS(ctx.GetCommonTlsContext())
	if err != nil {
		return nil, fmt.Errorf("upstream tls: %w", err)
	}
	return &upstreamTLS{tlsSettings: common, sni: ctx.GetSni()}, nil
}
