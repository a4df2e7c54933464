package xds

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	cluster "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	consul "github.com/hashicorp/consul/api"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/meshlet/meshlet/configentry"
)

// Proxy config keys read next to the service-defaults local timeouts.
const cfgLocalRequestTimeout = "local_request_timeout_ms"

// serviceDefaults is a service's service-defaults entry, nil when none.
func (b builder) serviceDefaults(service string) *consul.ServiceConfigEntry {
	sd, _ := b.entries().Get(configentry.ServiceDefaults, service).(*consul.ServiceConfigEntry)
	return sd
}

// localConnectTimeout is the local_app cluster's connect timeout: the proxy
// config's local_connect_timeout_ms, else the service's service-defaults
// LocalConnectTimeoutMs, else 5 s (Consul merges the entry's value into the
// proxy config only where the proxy config leaves it unset).
func (b builder) localConnectTimeout(cfg map[string]any, service string) (int, error) {
	def := defaultConnectTimeout
	if sd := b.serviceDefaults(service); sd != nil && sd.LocalConnectTimeoutMs > 0 {
		def = min(sd.LocalConnectTimeoutMs, maxConnectTimeoutMS)
	}
	return parseTimeoutMS(cfg, cfgLocalConnectTimeout, def)
}

// localRequestTimeout is the public HTTP listener's route timeout: the
// proxy config's local_request_timeout_ms (0 disables the timeout, as in
// Consul), else the service-defaults LocalRequestTimeoutMs when positive;
// nil keeps Envoy's default (15 s).
func (b builder) localRequestTimeout(cfg map[string]any, service string) (*durationpb.Duration, error) {
	if v, ok := cfg[cfgLocalRequestTimeout]; ok && v != nil {
		if isZero(v) {
			return durationpb.New(0), nil
		}
		ms, err := parseTimeoutMS(cfg, cfgLocalRequestTimeout, 0)
		if err != nil {
			return nil, err
		}
		return msDuration(ms), nil
	}
	if sd := b.serviceDefaults(service); sd != nil && sd.LocalRequestTimeoutMs > 0 {
		return msDuration(sd.LocalRequestTimeoutMs), nil
	}
	return nil, nil
}

// isZero reports whether a config value is the number 0 in any spelling
// HCL or JSON gives.
func isZero(v any) bool {
	switch n := v.(type) {
	case int:
		return n == 0
	case int32:
		return n == 0
	case int64:
		return n == 0
	case uint64:
		return n == 0
	case float32:
		return n == 0
	case float64:
		return n == 0
	case json.Number:
		f, err := n.Float64()
		return err == nil && f == 0
	case string:
		f, err := strconv.ParseFloat(strings.TrimSpace(n), 64)
		return err == nil && f == 0
	}
	return false
}

// upstreamSettings is the calling service's service-defaults UpstreamConfig
// for one destination: the Overrides entry named dest laid over Defaults,
// field by field where set (Consul's UpstreamConfig.MergeInto: Limits and
// PassiveHealthCheck are replaced whole, not merged).
func (b builder) upstreamSettings(own, dest string) consul.UpstreamConfig {
	var out consul.UpstreamConfig
	sd := b.serviceDefaults(own)
	if sd == nil || sd.UpstreamConfig == nil {
		return out
	}
	if d := sd.UpstreamConfig.Defaults; d != nil {
		out = *d
	}
	for _, o := range sd.UpstreamConfig.Overrides {
		if o == nil || o.Name != dest || o.Peer != "" {
			continue
		}
		if o.Protocol != "" {
			out.Protocol = o.Protocol
		}
		if o.ConnectTimeoutMs > 0 {
			out.ConnectTimeoutMs = o.ConnectTimeoutMs
		}
		if o.Limits != nil {
			out.Limits = o.Limits
		}
		if o.PassiveHealthCheck != nil {
			out.PassiveHealthCheck = o.PassiveHealthCheck
		}
	}
	return out
}

// applyUpstreamSettings adds an upstream's circuit breakers and outlier
// detection to one of its clusters.
func applyUpstreamSettings(c *cluster.Cluster, s consul.UpstreamConfig) error {
	if l := s.Limits; l != nil && (l.MaxConnections != nil || l.MaxPendingRequests != nil || l.MaxConcurrentRequests != nil) {
		th := &cluster.CircuitBreakers_Thresholds{Priority: core.RoutingPriority_DEFAULT}
		var err error
		if th.MaxConnections, err = limitValue("MaxConnections", l.MaxConnections); err != nil {
			return err
		}
		if th.MaxPendingRequests, err = limitValue("MaxPendingRequests", l.MaxPendingRequests); err != nil {
			return err
		}
		if th.MaxRequests, err = limitValue("MaxConcurrentRequests", l.MaxConcurrentRequests); err != nil {
			return err
		}
		c.CircuitBreakers = &cluster.CircuitBreakers{Thresholds: []*cluster.CircuitBreakers_Thresholds{th}}
	}
	if p := s.PassiveHealthCheck; p != nil {
		od, err := outlierDetection(p)
		if err != nil {
			return err
		}
		c.OutlierDetection = od
	}
	return nil
}

// limitValue is a circuit breaker threshold; nil leaves Envoy's default.
func limitValue(field string, v *int) (*wrapperspb.UInt32Value, error) {
	if v == nil {
		return nil, nil
	}
	if *v < 0 || *v > math.MaxUint32 {
		return nil, fmt.Errorf("%w: UpstreamConfig Limits.%s %d is out of range", ErrInvalidChain, field, *v)
	}
	return wrapperspb.UInt32(uint32(*v)), nil
}

// outlierDetection translates a passive health check as Consul does:
// MaxFailures is consecutive_5xx; unset fields keep Envoy's defaults
// (5 failures, 10 s interval, 30 s base ejection, 10 %, enforcing 100 %).
func outlierDetection(p *consul.PassiveHealthCheck) (*cluster.OutlierDetection, error) {
	od := &cluster.OutlierDetection{}
	if p.Interval < 0 {
		return nil, fmt.Errorf("%w: PassiveHealthCheck.Interval must not be negative", ErrInvalidChain)
	}
	if p.Interval > 0 {
		od.Interval = durationpb.New(p.Interval)
	}
	if p.MaxFailures > 0 {
		od.Consecutive_5Xx = wrapperspb.UInt32(p.MaxFailures)
	}
	if p.Consecutive5xx != nil {
		od.Consecutive_5Xx = wrapperspb.UInt32(*p.Consecutive5xx)
	}
	if p.EnforcingConsecutive5xx != nil {
		od.EnforcingConsecutive_5Xx = wrapperspb.UInt32(*p.EnforcingConsecutive5xx)
	}
	if p.MaxEjectionPercent != nil {
		od.MaxEjectionPercent = wrapperspb.UInt32(*p.MaxEjectionPercent)
	}
	if p.BaseEjectionTime != nil {
		if *p.BaseEjectionTime < 0 {
			return nil, fmt.Errorf("%w: PassiveHealthCheck.BaseEjectionTime must not be negative", ErrInvalidChain)
		}
		od.BaseEjectionTime = durationpb.New(*p.BaseEjectionTime)
	}
	return od, od.ValidateAll()
}
