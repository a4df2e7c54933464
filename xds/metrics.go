package xds

import (
	"errors"
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are the server's prometheus collectors, all prefixed meshlet_xds_.
type metrics struct {
	connected prometheus.Gauge
	pushes    *prometheus.CounterVec
	latency   *prometheus.HistogramVec
	nacks     *prometheus.CounterVec
	resources *prometheus.GaugeVec
	denied    prometheus.Counter
	revoked   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		connected: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "meshlet_xds_connected_proxies", Help: "Open xDS streams that identified a node.",
		}),
		pushes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshlet_xds_pushes_total", Help: "xDS responses sent, by resource type.",
		}, []string{"type"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "meshlet_xds_push_latency_seconds",
			Help:    "Time from a catalog or CA change to the proxy's ACK of the resulting push, by resource type.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"type"}),
		nacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "meshlet_xds_nacks_total", Help: "Responses rejected by a proxy, by resource type.",
		}, []string{"type"}),
		resources: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "meshlet_xds_resources", Help: "Resources in the xDS cache (shared and per proxy), by type.",
		}, []string{"type"}),
		denied: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshlet_xds_denied_streams_total", Help: "xDS streams ended because a request was not authorized.",
		}),
		revoked: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshlet_xds_revoked_streams_total", Help: "xDS streams ended because their ACL token was deleted, expired or lost its permission.",
		}),
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	for _, c := range []prometheus.Collector{m.connected, m.pushes, m.latency, m.nacks, m.resources, m.denied, m.revoked} {
		if err := reg.Register(c); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				return nil, fmt.Errorf("failed to register xDS metrics (one server per registry): %w", err)
			}
			return nil, fmt.Errorf("failed to register xDS metrics: %w", err)
		}
	}
	return m, nil
}

// typeLabel shortens a type URL to its message name: "Listener", "Secret"...
func typeLabel(typeURL string) string {
	if i := strings.LastIndexByte(typeURL, '.'); i >= 0 {
		return typeURL[i+1:]
	}
	return typeURL
}
