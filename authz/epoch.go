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
	"github.com/meshlet/meshlet/internal/pubsub"
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
	gen  uint64                 // guarded by mu
	cur  atomic.Pointer[string] // boot + "-" + gen, read by every Check

	mu     sync.Mutex // serializes moves, notifications and (un)subscribing
	hub    pubsub.Hub[string]
	unsubs []func() // from the intentions and the CA, while subscribed
}

func newEpochs() *epochs {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	e := &epochs{boot: hex.EncodeToString(b)}
	e.advance()
	return e
}

// advance moves to the next epoch; the caller holds mu (or owns e).
func (e *epochs) advance() string {
	e.gen++
	cur := e.boot + "-" + strconv.FormatUint(e.gen, 10)
	e.cur.Store(&cur)
	return cur
}

// Epoch is the current authorization epoch.
func (s *Service) Epoch() string { return *s.ep.cur.Load() }

// SubscribeEpoch calls fn with the current epoch, then with each new one,
// in order and one call at a time, until cancel is called. The epoch moves
// only while someone is subscribed (and at once when the first one
// subscribes).
func (s *Service) SubscribeEpoch(fn func(epoch string)) (cancel func()) {
	e := s.ep
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.hub.Len() == 0 {
		e.unsubs = []func(){s.ix.Subscribe(s.moveEpoch)}
		if s.ca != nil {
			e.unsubs = append(e.unsubs, s.ca.Subscribe(func(ca.Event) { s.moveEpoch() }))
		}
		e.advance() // changes while nobody watched are behind us
	}
	unsub := e.hub.Subscribe(fn)
	fn(s.Epoch())
	var once sync.Once
	return func() {
		once.Do(func() {
			e.mu.Lock()
			defer e.mu.Unlock()
			unsub()
			if e.hub.Len() == 0 {
				for _, u := range e.unsubs {
					u()
				}
				e.unsubs = nil
			}
		})
	}
}

// moveEpoch starts a new epoch and tells the subscribers, one move at a
// time so that they see the epochs in order.
func (s *Service) moveEpoch() {
	e := s.ep
	e.mu.Lock()
	defer e.mu.Unlock()
	e.hub.Publish(e.advance())
}

// markCacheable adds the epoch to an allow that only the identity pair
// decided.
func markCacheable(resp *authv3.CheckResponse, d Decision, epoch string) {
	if !d.Allowed || (d.Matched != nil && d.Matched.IsL7()) {
		return
	}
	resp.DynamicMetadata = &structpb.Struct{Fields: map[string]*structpb.Value{EpochKey: structpb.NewStringValue(epoch)}}
}
