package sidecar

import (
	"errors"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	"google.golang.org/protobuf/types/known/durationpb"
)

// Envoy's outlier_detection defaults.
const (
	defaultConsecutive5xx     = 5
	defaultOutlierInterval    = 10 * time.Second
	defaultBaseEjectionTime   = 30 * time.Second
	defaultMaxEjectionTime    = 300 * time.Second
	defaultMaxEjectionPercent = 10
	defaultEnforcing5xx       = 100
)

// outlierConfig is a cluster's decoded outlier_detection: consecutive 5xx
// (and, as Envoy counts them unless told to split them, connect failures,
// resets and timeouts) eject an endpoint.
type outlierConfig struct {
	consecutive5xx     uint32
	interval           time.Duration
	baseEjectionTime   time.Duration
	maxEjectionTime    time.Duration
	maxEjectionPercent uint32
	enforcing5xx       uint32
}

// decodeOutlierDetection returns nil when the cluster has none.
func decodeOutlierDetection(od *clusterv3.OutlierDetection) (*outlierConfig, error) {
	if od == nil {
		return nil, nil
	}
	out := &outlierConfig{
		consecutive5xx:     defaultConsecutive5xx,
		interval:           defaultOutlierInterval,
		baseEjectionTime:   defaultBaseEjectionTime,
		maxEjectionTime:    defaultMaxEjectionTime,
		maxEjectionPercent: defaultMaxEjectionPercent,
		enforcing5xx:       defaultEnforcing5xx,
	}
	if v := od.GetConsecutive_5Xx(); v != nil {
		out.consecutive5xx = max(v.GetValue(), 1)
	}
	var err error
	duration := func(d *durationpb.Duration, dst *time.Duration, what string) {
		if d == nil || err != nil {
			return
		}
		if d.CheckValid() != nil || d.AsDuration() <= 0 {
			err = errors.New("outlier_detection." + what + " must be positive")
			return
		}
		*dst = d.AsDuration()
	}
	duration(od.GetInterval(), &out.interval, "interval")
	duration(od.GetBaseEjectionTime(), &out.baseEjectionTime, "base_ejection_time")
	duration(od.GetMaxEjectionTime(), &out.maxEjectionTime, "max_ejection_time")
	if err != nil {
		return nil, err
	}
	out.maxEjectionTime = max(out.maxEjectionTime, out.baseEjectionTime)
	if v := od.GetMaxEjectionPercent(); v != nil {
		if v.GetValue() > 100 {
			return nil, errors.New("outlier_detection.max_ejection_percent must be at most 100")
		}
		out.maxEjectionPercent = v.GetValue()
	}
	if v := od.GetEnforcingConsecutive_5Xx(); v != nil {
		if v.GetValue() > 100 {
			return nil, errors.New("outlier_detection.enforcing_consecutive_5xx must be at most 100")
		}
		out.enforcing5xx = v.GetValue()
	}
	return out, nil
}

// hostOutlier is one endpoint's outlier state; it lives in hostStats so it
// survives endpoint and cluster updates.
type hostOutlier struct {
	consecutive  atomic.Uint32
	ejectedUntil atomic.Int64 // unix nanoseconds; 0: never ejected
	times        atomic.Uint32
}

// ejected reports whether the endpoint is out of the load-balancing pool
// at now. An ejection ends by itself after its time (Envoy checks at each
// interval; here the next pick after expiry sees the host back).
func (o *hostOutlier) ejected(now time.Time) bool {
	return now.UnixNano() < o.ejectedUntil.Load()
}

// outlierStats are the cluster's outlier_detection.* counters.
type outlierStats struct {
	mu       sync.Mutex // serializes ejection decisions (max_ejection_percent)
	enforced *atomic.Uint64
	cons5xx  *atomic.Uint64
	overflow *atomic.Uint64
	active   *atomic.Int64
}

func newOutlierStats(reg *statsRegistry, name string) *outlierStats {
	p := "cluster." + name + ".outlier_detection."
	return &outlierStats{
		enforced: reg.counter(p + "ejections_enforced_total"),
		cons5xx:  reg.counter(p + "ejections_enforced_consecutive_5xx"),
		overflow: reg.counter(p + "ejections_overflow"),
		active:   reg.gauge(p + "ejections_active"),
	}
}

// outlierResult records one exchange with h: failed is a 5xx, a connect
// failure, a reset or a timeout. Enough consecutive failures eject h for
// base_ejection_time times the number of its ejections (capped at
// max_ejection_time), unless max_ejection_percent of the cluster is
// already ejected (one host may always be).
func (c *cluster) outlierResult(st *clusterState, h *host, failed bool) {
	od := st.cfg.outlier
	if od == nil || h == nil {
		return
	}
	o := &h.stats.outlier
	if !failed {
		o.consecutive.Store(0)
		return
	}
	now := time.Now()
	if o.consecutive.Add(1) < od.consecutive5xx || o.ejected(now) {
		return
	}
	o.consecutive.Store(0)
	if od.enforcing5xx < 100 && rand.Uint32N(100) >= od.enforcing5xx {
		return
	}
	c.outlier.mu.Lock()
	defer c.outlier.mu.Unlock()
	ejected := 0
	for _, other := range st.hosts {
		if other != h && other.stats.outlier.ejected(now) {
			ejected++
		}
	}
	if ejected > 0 && 100*(ejected+1) > int(od.maxEjectionPercent)*len(st.hosts) {
		c.outlier.overflow.Add(1)
		return
	}
	// The multiplier decays by one for every interval the host stayed in.
	times := o.times.Load()
	if until := o.ejectedUntil.Load(); until > 0 && times > 0 {
		healthyFor := now.Sub(time.Unix(0, until))
		times -= min(times, uint32(max(healthyFor/od.interval, 0)))
	}
	times++
	o.times.Store(times)
	d := min(od.baseEjectionTime*time.Duration(times), od.maxEjectionTime)
	o.ejectedUntil.Store(now.Add(d).UnixNano())
	c.outlier.enforced.Add(1)
	c.outlier.cons5xx.Add(1)
	c.outlier.active.Store(int64(ejected + 1))
}

// anyEjected reports whether some endpoint of st is ejected at now, and
// keeps the ejections_active gauge current (ejections end lazily).
func (c *cluster) anyEjected(st *clusterState, now time.Time) bool {
	if st.cfg.outlier == nil {
		return false
	}
	n := 0
	for _, h := range st.hosts {
		if h.stats.outlier.ejected(now) {
			n++
		}
	}
	if c.outlier != nil {
		c.outlier.active.Store(int64(n))
	}
	return n > 0
}
