package authz

import (
	"crypto/rand"
	"encoding/hex"
	"strconv"
	"sync"
	"sync/atomic"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/meshlet/meshlet/ca"
)

// Authorization epochs: what lets a sidecar cache an allow.
//
// An allow that depends only on the (source, destination) pair (no L7
// intention decided it) is marked with the epoch it was decided in: the
// Check response's dynamic metadata EpochKey. The epoch is this service's
// boot nonce and a counter that moves after every change of the
// intentions or the CA; the xDS server publishes it to the sidecars (RTDS
// resource EpochResource), which keep a marked allow only while its epoch
// is the one they were last sent. The epoch is read before the decision,
// so an answer is never marked with an epoch newer than the state it was
// decided on.
const (
	// EpochResource is the name of the RTDS resource with the epoch.
	EpochResource = "meshlet.authz_epoch"
	// EpochKey names the epoch in that resource's layer and in a Check
	// response's dynamic metadata.
	EpochKey = "meshlet_authz_epoch"
)

// epochs is a Service's epoch state.
type epochs struct {
	boot string
	gen  atomic.Uint64

	mu     sync.Mutex // serializes moves and notifications
	subs   map[int]func(string)
	nextID int
	unsubs []func() // from the intentions and the CA, while subscribed
}

func newBootNonce() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Epoch is the current authorization epoch.
func (s *Service) Epoch() string {
	return s.ep.boot + "-" + strconv.FormatUint(s.ep.gen.Load(), 10)
}

// SubscribeEpoch calls fn with the current epoch, then with each new one,
// in order and one call at a time, until cancel is called. The epoch moves
// only while someone is subscribed (and at once when the first one
// subscribes).
func (s *Service) SubscribeEpoch(fn func(epoch string)) (cancel func()) {
	e := &s.ep
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.subs) == 0 {
		e.subs = map[int]func(string){}
		e.unsubs = []func(){s.ix.Subscribe(s.moveEpoch)}
		if s.ca != nil {
			e.unsubs = append(e.unsubs, s.ca.Subscribe(func(ca.Event) { s.moveEpoch() }))
		}
		e.gen.Add(1) // changes while nobody watched are behind us
	}
	id := e.nextID
	e.nextID++
	e.subs[id] = fn
	fn(s.Epoch())
	return func() {
		e.mu.Lock()
		defer e.mu.Unlock()
		if _, ok := e.subs[id]; !ok {
			return
		}
		delete(e.subs, id)
		if len(e.subs) == 0 {
			for _, u := range e.unsubs {
				u()
			}
			e.unsubs = nil
		}
	}
}

// moveEpoch starts a new epoch and tells the subscribers.
func (s *Service) moveEpoch() {
	e := &s.ep
	e.mu.Lock()
	defer e.mu.Unlock()
	e.gen.Add(1)
	cur := s.Epoch()
	for _, fn := range e.subs {
		fn(cur)
	}
}

// markCacheable adds the epoch to an allow that only the identity pair
// decided.
func markCacheable(resp *authv3.CheckResponse, d Decision, epoch string) {
	if !d.Allowed || (d.Matched != nil && d.Matched.IsL7()) {
		return
	}
	resp.DynamicMetadata = &structpb.Struct{Fields: map[string]*structpb.Value{EpochKey: structpb.NewStringValue(epoch)}}
}
