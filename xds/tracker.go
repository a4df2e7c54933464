package xds

import (
	"context"
	"errors"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	serverv3 "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
)

// changeTimesKept bounds the version -> change time table.
const changeTimesKept = 4096

// streamKey identifies a stream: the SotW and delta servers number their
// streams independently.
type streamKey struct {
	delta bool
	id    int64
}

// sent is the last response of one type on one stream.
type sent struct {
	nonce   string
	version uint64
	pushed  bool // sent by a change, not as the answer to a request
}

type streamState struct {
	peer    peerInfo // the listener the stream came through
	token   string   // the x-consul-token metadata (a secret: never logged)
	grant   *grant   // what it may ask for; nil until it names a node
	rev     *revoker // ends the stream when its token is revoked (nil in tests of the callbacks)
	node    string
	reqVer  map[string]uint64 // type -> cache version when the last request came
	lastOut map[string]sent   // type -> last response
}

// tracker implements go-control-plane's server callbacks: it follows every
// stream's node, nonces and versions to tell ACKs from NACKs, feeds the
// metrics and the proxy status table. Lock rule: mu guards streams and
// changed; it is never held while calling the server or the cache.
type tracker struct {
	s       *Server
	mu      sync.Mutex
	streams map[streamKey]*streamState
	changed map[uint64]time.Time // version -> time of the change that made it
	nodes   map[string]int       // node -> open streams
}

var _ serverv3.Callbacks = (*tracker)(nil)

func newTracker(s *Server) *tracker {
	return &tracker{s: s, streams: map[streamKey]*streamState{}, changed: map[uint64]time.Time{}, nodes: map[string]int{}}
}

// setChangeTime records when the change published as version v happened.
func (t *tracker) setChangeTime(v uint64, at time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.changed[v] = at
	if v > changeTimesKept {
		delete(t.changed, v-changeTimesKept)
	}
}

// allocGranted reports whether an open stream through allocation
// allocID's socket was granted service's leaf: as its proxy's destination,
// or as a service its terminating gateway links now.
func (t *tracker) allocGranted(allocID, service string) bool {
	var gateways []grant
	t.mu.Lock()
	for _, st := range t.streams {
		if st.peer.kind != peerAlloc || st.peer.allocID != allocID || st.grant == nil {
			continue
		}
		if st.grant.service == service {
			t.mu.Unlock()
			return true
		}
		if st.grant.gateway != "" {
			gateways = append(gateways, *st.grant)
		}
	}
	t.mu.Unlock()
	for i := range gateways {
		if t.s.linkedLeaf(&gateways[i], LeafSecretName(service)) {
			return true
		}
	}
	return false
}

// connected reports whether node has an open stream.
func (t *tracker) connected(node string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.nodes[node] > 0
}

func (t *tracker) open(ctx context.Context, k streamKey) error {
	who := peerOf(ctx)
	if who.kind == peerUnknown {
		return t.deny(who, "", errors.New("connection did not come through a meshlet listener"))
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.streams[k] = &streamState{peer: who, token: tokenOf(ctx), rev: revokerOf(ctx), reqVer: map[string]uint64{}, lastOut: map[string]sent{}}
	return nil
}

func (t *tracker) closed(k streamKey) {
	t.mu.Lock()
	st := t.streams[k]
	delete(t.streams, k)
	t.mu.Unlock()
	if st != nil && st.node != "" {
		t.mu.Lock()
		if t.nodes[st.node]--; t.nodes[st.node] <= 0 {
			delete(t.nodes, st.node)
		}
		t.mu.Unlock()
		t.s.m.connected.Dec()
		t.s.streamClosed(st.node)
	}
}

// request classifies one request: first of its type, ACK, NACK or stale.
func (t *tracker) request(k streamKey, node, typeURL, nonce string, errDetail *status.Status) {
	cur := t.s.cache.currentVersion()
	t.mu.Lock()
	st := t.streams[k]
	if st == nil {
		t.mu.Unlock()
		return
	}
	if st.node == "" && node != "" {
		st.node = node
		t.nodes[node]++
		t.s.m.connected.Inc()
	}
	node = st.node
	st.reqVer[typeURL] = cur
	last, ok := st.lastOut[typeURL]
	if !ok || nonce == "" || nonce != last.nonce {
		t.mu.Unlock()
		return
	}
	var changedAt time.Time
	if last.pushed {
		changedAt = t.changed[last.version]
	}
	t.mu.Unlock()
	if errDetail != nil {
		t.s.m.nacks.WithLabelValues(typeLabel(typeURL)).Inc()
		t.s.recordNack(node, typeURL, last.version, errDetail.GetMessage())
		return
	}
	if !changedAt.IsZero() {
		t.s.m.latency.WithLabelValues(typeLabel(typeURL)).Observe(time.Since(changedAt).Seconds())
	}
	t.s.recordAck(node, typeURL)
}

func (t *tracker) response(k streamKey, typeURL, nonce string, version uint64) {
	t.s.m.pushes.WithLabelValues(typeLabel(typeURL)).Inc()
	t.mu.Lock()
	defer t.mu.Unlock()
	st := t.streams[k]
	if st == nil {
		return
	}
	st.lastOut[typeURL] = sent{nonce: nonce, version: version, pushed: version > st.reqVer[typeURL]}
}

// OnStreamOpen implements sotw.Callbacks.
func (t *tracker) OnStreamOpen(ctx context.Context, id int64, _ string) error {
	return t.open(ctx, streamKey{id: id})
}

// OnStreamClosed implements sotw.Callbacks.
func (t *tracker) OnStreamClosed(id int64, _ *core.Node) { t.closed(streamKey{id: id}) }

// OnStreamRequest implements sotw.Callbacks. It authorizes the request
// before the server creates its watch: a SotW request carries the full
// subscription, so every secret name is checked each time.
func (t *tracker) OnStreamRequest(id int64, req *discovery.DiscoveryRequest) error {
	var secrets []string
	if req.GetTypeUrl() == secretType {
		secrets = req.GetResourceNames()
	}
	if err := t.authorize(streamKey{id: id}, req.GetNode().GetId(), secrets); err != nil {
		return err
	}
	t.request(streamKey{id: id}, req.GetNode().GetId(), req.GetTypeUrl(), req.GetResponseNonce(), req.GetErrorDetail())
	return nil
}

// OnStreamResponse implements sotw.Callbacks.
func (t *tracker) OnStreamResponse(_ context.Context, id int64, _ *discovery.DiscoveryRequest, resp *discovery.DiscoveryResponse) {
	t.response(streamKey{id: id}, resp.GetTypeUrl(), resp.GetNonce(), parseVersion(resp.GetVersionInfo()))
}

// OnDeltaStreamOpen implements delta.Callbacks.
func (t *tracker) OnDeltaStreamOpen(ctx context.Context, id int64, _ string) error {
	return t.open(ctx, streamKey{delta: true, id: id})
}

// OnDeltaStreamClosed implements delta.Callbacks.
func (t *tracker) OnDeltaStreamClosed(id int64, _ *core.Node) {
	t.closed(streamKey{delta: true, id: id})
}

// OnStreamDeltaRequest implements delta.Callbacks. The node is only
// guaranteed on a stream's first request; the tracker remembers it. It
// authorizes the names a request adds (subscriptions and the initial
// versions of a reconnecting client) before the server updates the
// subscription.
func (t *tracker) OnStreamDeltaRequest(id int64, req *discovery.DeltaDiscoveryRequest) error {
	var secrets []string
	if req.GetTypeUrl() == secretType {
		secrets = append(secrets, req.GetResourceNamesSubscribe()...)
		for name := range req.GetInitialResourceVersions() {
			secrets = append(secrets, name)
		}
	}
	if err := t.authorize(streamKey{delta: true, id: id}, req.GetNode().GetId(), secrets); err != nil {
		return err
	}
	t.request(streamKey{delta: true, id: id}, req.GetNode().GetId(), req.GetTypeUrl(), req.GetResponseNonce(), req.GetErrorDetail())
	return nil
}

// OnStreamDeltaResponse implements delta.Callbacks.
func (t *tracker) OnStreamDeltaResponse(id int64, _ *discovery.DeltaDiscoveryRequest, resp *discovery.DeltaDiscoveryResponse) {
	t.response(streamKey{delta: true, id: id}, resp.GetTypeUrl(), resp.GetNonce(), parseVersion(resp.GetSystemVersionInfo()))
}

// OnFetchRequest implements rest.Callbacks; fetch is refused by the cache.
func (t *tracker) OnFetchRequest(context.Context, *discovery.DiscoveryRequest) error {
	return errFetchUnsupported
}

// OnFetchResponse implements rest.Callbacks.
func (t *tracker) OnFetchResponse(*discovery.DiscoveryRequest, *discovery.DiscoveryResponse) {}
