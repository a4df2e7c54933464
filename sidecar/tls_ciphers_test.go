package sidecar

import (
	"crypto/tls"
	"reflect"
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
)

func TestDecodeTLSCipherSuites(t *testing.T) {
	sds := []*tlsv3.SdsSecretConfig{{Name: "leaf:gw", SdsConfig: &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_Ads{Ads: &corev3.AggregatedConfigSource{}}}}}
	c := &tlsv3.CommonTlsContext{TlsCertificateSdsSecretConfigs: sds,
		TlsParams: &tlsv3.TlsParameters{CipherSuites: []string{"ECDHE-ECDSA-AES128-GCM-SHA256", "ECDHE-RSA-AES256-SHA"}}}
	s, err := decodeCommonTLS(c)
	if err != nil {
		t.Fatal(err)
	}
	if want := []uint16{tls.TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256, tls.TLS_ECDHE_RSA_WITH_AES_256_CBC_SHA}; !reflect.DeepEqual(s.ciphers, want) {
		t.Fatalf("ciphers = %v, want %v", s.ciphers, want)
	}
	c.TlsParams.CipherSuites = []string{"RC4-SHA"}
	if _, err := decodeCommonTLS(c); err == nil || !strings.Contains(err.Error(), `cipher suite "RC4-SHA" is not supported`) {
		t.Fatalf("unknown suite: %v", err)
	}
}

// An ingress listener whose certificate comes from an external SDS server
// is refused with a clear error: the built-in proxy only fetches over ADS.
func TestDecodeTLSExternalSDSRefused(t *testing.T) {
	c := &tlsv3.CommonTlsContext{TlsCertificateSdsSecretConfigs: []*tlsv3.SdsSecretConfig{{Name: "example.com-cert",
		SdsConfig: &corev3.ConfigSource{ConfigSourceSpecifier: &corev3.ConfigSource_ApiConfigSource{ApiConfigSource: &corev3.ApiConfigSource{
			ApiType: corev3.ApiConfigSource_GRPC}}}}}}
	_, err := decodeCommonTLS(c)
	if err == nil || !strings.Contains(err.Error(), "external SDS server (api_config_source) is not supported by the built-in proxy") {
		t.Fatalf("external SDS: %v", err)
	}
}
