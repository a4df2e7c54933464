package sidecar

import (
	"hash/fnv"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"time"
)

// ringPointsPerHost is how many points a host of the smallest weight gets
// on a ring_hash ring. A fixed count per host (not a fixed ring size)
// means a host leaving moves only its own keys.
const ringPointsPerHost = 160

// lbContext is what a request tells the load balancer: its hash (from
// the route's hash_policy) for ring_hash.
type lbContext struct {
	hash    uint64
	hasHash bool
	// setCookie is a generated hash cookie for the response ("" none).
	setCookie string
}

// ringPoint is one point of a consistent hash ring.
type ringPoint struct {
	hash uint64
	idx  int // index in the ring's group
}

type hashRing []ringPoint

// buildRing places every host of g on a ring, weighted by its endpoint
// weight.
func buildRing(g []*host) hashRing {
	if len(g) == 0 {
		return nil
	}
	minW := uint64(math.MaxUint32)
	for _, h := range g {
		minW = min(minW, uint64(max(h.ep.weight, 1)))
	}
	ring := make(hashRing, 0, ringPointsPerHost*len(g))
	for i, h := range g {
		n := int(min(ringPointsPerHost*uint64(max(h.ep.weight, 1))/minW, 10*ringPointsPerHost))
		for k := 0; k < n; k++ {
			ring = append(ring, ringPoint{hash: hashString(h.ep.addr + "_" + strconv.Itoa(k)), idx: i})
		}
	}
	sort.Slice(ring, func(a, b int) bool { return ring[a].hash < ring[b].hash })
	return ring
}

// lookup returns the group index of the first point at or after hash.
func (r hashRing) lookup(hash uint64) int {
	i := sort.Search(len(r), func(i int) bool { return r[i].hash >= hash })
	if i == len(r) {
		i = 0
	}
	return r[i].idx
}

// hashString is FNV-1a with murmur3's 64-bit finalizer, so that keys
// differing in their last bytes spread over the whole ring.
func hashString(s string) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(s))
	k := h.Sum64()
	k ^= k >> 33
	k *= 0xff51afd7ed558ccd
	k ^= k >> 33
	k *= 0xc4ceb9fe1a85ec53
	k ^= k >> 33
	return k
}

// buildRings prepares the ring_hash rings of a state.
func (st *clusterState) buildRings() {
	st.rings = make([]hashRing, len(st.healthy))
	for i, g := range st.healthy {
		st.rings[i] = buildRing(g)
	}
	st.panic = buildRing(st.hosts)
}

// candidates returns the endpoints to try, in order: the policy's pick
// (round robin, random, least request or ring hash) then the rest within
// each priority of healthy endpoints, lower priorities first; all endpoints
// if none is healthy (Envoy's panic mode). Hosts in exclude (tried by an
// earlier attempt) go last, so a retry picks another host when there is one.
func (c *cluster) candidates(st *clusterState, lbc lbContext, exclude []*host) []*host {
	return c.candidatesInto(make([]*host, 0, maxConnectAttempts), st, lbc, exclude)
}

// candidatesInto is candidates appending to out (a caller's buffer, so the
// request path allocates no list).
func (c *cluster) candidatesInto(out []*host, st *clusterState, lbc lbContext, exclude []*host) []*host {
	groups := st.healthy
	rings := st.rings
	if len(groups) == 0 && len(st.hosts) > 0 {
		groups = [][]*host{st.hosts}
		rings = []hashRing{st.panic}
	}
	now := time.Now()
	ejected := c.anyEjected(st, now)
	// One turn of the round robin per pick, whatever the number of
	// groups it spans.
	var turn uint64
	if st.cfg.lb == lbRoundRobin {
		turn = c.rr.Add(1) - 1
	}
	for gi, g := range groups {
		var ring hashRing
		if gi < len(rings) {
			ring = rings[gi]
		}
		start := c.pickStart(st.cfg, g, ring, lbc, turn)
		for i := range g {
			out = append(out, g[(start+i)%len(g)])
			if len(out) == maxConnectAttempts && len(exclude) == 0 && !ejected {
				return out
			}
		}
	}
	if len(exclude) > 0 || ejected {
		// Stable: untried hosts first, in policy order; hosts ejected by
		// outlier detection after every other (Envoy's panic mode when
		// all are ejected), then the tried ones.
		rank := func(h *host) int {
			return 2*boolInt(slices.Contains(exclude, h)) + boolInt(ejected && h.stats.outlier.ejected(now))
		}
		slices.SortStableFunc(out, func(a, b *host) int { return rank(a) - rank(b) })
		out = out[:min(len(out), maxConnectAttempts)]
	}
	return out
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// pickStart picks the first host of a group under the cluster's policy;
// turn is the pick's round robin position.
func (c *cluster) pickStart(cfg *clusterConfig, g []*host, ring hashRing, lbc lbContext, turn uint64) int {
	n := len(g)
	switch lb := cfg.lb; {
	case n == 1:
		return 0
	case lb == lbRingHash && lbc.hasHash && len(ring) > 0:
		return ring.lookup(lbc.hash)
	case lb == lbRandom || lb == lbRingHash:
		return rand.IntN(n) // ring_hash without a hash: Envoy picks at random
	case lb == lbLeastRequest:
		// Envoy's power of choice_count (default two) random choices.
		best := rand.IntN(n)
		for i := 1; i < max(cfg.choiceCount, 2); i++ {
			if cand := rand.IntN(n); hostLoad(g[cand]) < hostLoad(g[best]) {
				best = cand
			}
		}
		return best
	}
	return int(turn % uint64(n))
}

// hostLoad is a host's active requests (HTTP) plus connections (TCP).
func hostLoad(h *host) int64 { return h.stats.rqActive.Load() + h.stats.cxActive.Load() }
