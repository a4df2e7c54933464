package xds

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/meshlet/meshlet/catalog"
)

// ErrInvalidProxyConfig wraps every error in a proxy's or upstream's
// free-form config (unknown protocol, bad timeout, bad escape hatch).
var ErrInvalidProxyConfig = errors.New("invalid proxy config")

// Config keys understood in proxy { config {} } and upstream { config {} }.
const (
	cfgProtocol            = "protocol"
	cfgLocalConnectTimeout = "local_connect_timeout_ms"
	cfgConnectTimeout      = "connect_timeout_ms"
	cfgPublicListenerJSON  = "envoy_public_listener_json"
	defaultConnectTimeout  = 5000
	maxConnectTimeoutMS    = 10 * 60 * 1000
)

// protocol is a listener's L4/L7 mode.
type protocol string

const (
	protoTCP   protocol = "tcp"
	protoHTTP  protocol = "http"
	protoHTTP2 protocol = "http2"
	protoGRPC  protocol = "grpc"
)

// isHTTP reports whether the protocol is served by an HTTP connection manager.
func (p protocol) isHTTP() bool { return p != protoTCP }

// isHTTP2 reports whether the upstream side must speak HTTP/2.
func (p protocol) isHTTP2() bool { return p == protoHTTP2 || p == protoGRPC }

// parseProtocol reads the protocol key; unset means tcp.
func parseProtocol(cfg map[string]any) (protocol, error) {
	v, ok := cfg[cfgProtocol]
	if !ok || v == nil {
		return protoTCP, nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%w: %s must be a string, got %T", ErrInvalidProxyConfig, cfgProtocol, v)
	}
	switch p := protocol(strings.ToLower(strings.TrimSpace(s))); p {
	case "":
		return protoTCP, nil
	case protoTCP, protoHTTP, protoHTTP2, protoGRPC:
		return p, nil
	default:
		return "", fmt.Errorf("%w: %s %q is not one of tcp, http, http2, grpc", ErrInvalidProxyConfig, cfgProtocol, s)
	}
}

// proxyConfig is an instance's free-form proxy config (nil without one).
func proxyConfig(inst catalog.ServiceInstance) map[string]any {
	if inst.Proxy == nil {
		return nil
	}
	return inst.Proxy.Config
}

// parseTimeoutMS reads a positive millisecond count, def when unset. Values
// come from HCL or JSON, so ints, floats and numeric strings are accepted.
func parseTimeoutMS(cfg map[string]any, key string, def int) (int, error) {
	v, ok := cfg[key]
	if !ok || v == nil {
		return def, nil
	}
	var f float64
	switch n := v.(type) {
	case int:
		f = float64(n)
	case int32:
		f = float64(n)
	case int64:
		f = float64(n)
	case uint64:
		f = float64(n)
	case float32:
		f = float64(n)
	case float64:
		f = n
	case json.Number:
		x, err := n.Float64()
		if err != nil {
			return 0, fmt.Errorf("%w: %s %q is not a number", ErrInvalidProxyConfig, key, n.String())
		}
		f = x
	case string:
		x, err := strconv.ParseFloat(strings.TrimSpace(n), 64)
		if err != nil {
			return 0, fmt.Errorf("%w: %s %q is not a number", ErrInvalidProxyConfig, key, n)
		}
		f = x
	default:
		return 0, fmt.Errorf("%w: %s must be a number, got %T", ErrInvalidProxyConfig, key, v)
	}
	if math.IsNaN(f) || f < 1 || f > maxConnectTimeoutMS || f != math.Trunc(f) {
		return 0, fmt.Errorf("%w: %s must be a whole number of milliseconds between 1 and %d, got %v", ErrInvalidProxyConfig, key, maxConnectTimeoutMS, v)
	}
	return int(f), nil
}

// parseString reads an optional string key.
func parseString(cfg map[string]any, key string) (string, error) {
	v, ok := cfg[key]
	if !ok || v == nil {
		return "", nil
	}
	s, ok := v.(string)
	if !ok {
		return "", fmt.Errorf("%w: %s must be a string, got %T", ErrInvalidProxyConfig, key, v)
	}
	return s, nil
}
