package sidecar

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"sync"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

// typeHTTPProtocolOptions is the cluster extension that selects the
// upstream HTTP protocol.
const typeHTTPProtocolOptions = "envoy.extensions.upstreams.http.v3.HttpProtocolOptions"

// decodeHTTPProtocol reports whether a cluster speaks HTTP/2 to its
// endpoints: explicit http2_protocol_options in its HttpProtocolOptions
// (or the deprecated cluster field).
func decodeHTTPProtocol(c *clusterv3.Cluster) (bool, error) {
	//lint:ignore SA1019 the deprecated field is still what older control planes send
	if c.GetHttp2ProtocolOptions() != nil {
		return true, nil
	}
	a, ok := c.GetTypedExtensionProtocolOptions()[typeHTTPProtocolOptions]
	if !ok {
		return false, nil
	}
	var o upstreamhttpv3.HttpProtocolOptions
	if err := unmarshalAny(a, &o); err != nil {
		return false, fmt.Errorf("typed_extension_protocol_options: %w", err)
	}
	switch p := o.GetUpstreamProtocolOptions().(type) {
	case *upstreamhttpv3.HttpProtocolOptions_ExplicitHttpConfig_:
		return p.ExplicitHttpConfig.GetHttp2ProtocolOptions() != nil, nil
	case *upstreamhttpv3.HttpProtocolOptions_UseDownstreamProtocolConfig:
		return false, nil // HTTP/1.1 always works towards our endpoints
	case nil:
		return false, nil
	default:
		return false, fmt.Errorf("typed_extension_protocol_options: %T is not supported", p)
	}
}

// h2Transport is an HTTP/2 cluster's client: one multiplexed connection
// per endpoint, speaking HTTP/2 with prior knowledge over what the dialer
// returns: plain TCP (h2c) or the cluster's TLS (offering ALPN h2). The
// dialer connects to exactly the endpoint a request names, with the
// cluster's connect timeout and TLS.
type h2Transport struct {
	dial func(ctx context.Context, addr string) (net.Conn, error)
	once sync.Once
	t    *http.Transport
}

func (h *h2Transport) transport() *http.Transport {
	h.once.Do(func() {
		var protos http.Protocols
		protos.SetUnencryptedHTTP2(true) // prior knowledge; TLS is the dialer's
		h.t = &http.Transport{
			Protocols: &protos,
			DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
				return h.dial(ctx, addr)
			},
			MaxIdleConnsPerHost: upstreamMaxIdlePerHost,
			IdleConnTimeout:     upstreamIdleTimeout,
			HTTP2:               &http.HTTP2Config{SendPingTimeout: 30 * time.Second, PingTimeout: 10 * time.Second},
		}
	})
	return h.t
}

func (h *h2Transport) roundTrip(req *http.Request) (*http.Response, error) {
	req.URL.Scheme = "http"
	return h.transport().RoundTrip(req)
}

func (h *h2Transport) closeIdle() { h.transport().CloseIdleConnections() }

// closeIdle closes the idle pooled connections of both transports.
func (c *cluster) closeIdle() {
	c.transport.CloseIdleConnections()
	c.h2.closeIdle()
}
