package ca

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	issued    prometheus.Counter
	rotations prometheus.Counter
	evicted   prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		issued: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshlet_ca_certificates_issued_total",
			Help: "Leaf certificates signed by the CA.",
		}),
		rotations: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshlet_ca_root_rotations_total",
			Help: "CA root rotations.",
		}),
		evicted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "meshlet_ca_api_leaves_evicted_total",
			Help: "API-only leaf certificates evicted from the cache to stay within its cap.",
		}),
	}
	if reg == nil {
		return m, nil
	}
	var err error
	if m.issued, err = register(reg, m.issued); err != nil {
		return nil, err
	}
	if m.rotations, err = register(reg, m.rotations); err != nil {
		return nil, err
	}
	if m.evicted, err = register(reg, m.evicted); err != nil {
		return nil, err
	}
	return m, nil
}

// register registers c, reusing an identical collector already registered
// (a second Manager on the same registry shares the counters).
func register(reg prometheus.Registerer, c prometheus.Counter) (prometheus.Counter, error) {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(prometheus.Counter); ok {
				return existing, nil
			}
		}
		return nil, fmt.Errorf("failed to register CA metrics: %w", err)
	}
	return c, nil
}
