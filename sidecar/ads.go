package sidecar

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// Reconnect and NACK-hold tuning.
const (
	backoffBase = 250 * time.Millisecond
	backoffMax  = 5 * time.Second
	nackHoldMax = 5 * time.Second
)

// adsStream is one ADS stream, delta or state-of-the-world.
type adsStream interface {
	// subscribe sends a subscription change for t. first marks the type's
	// first request on this stream.
	subscribe(t *typeState, added, removed []string, first bool) error
	ack(t *typeState, u *update) error
	nack(t *typeState, u *update, cause error) error
	recv() (*update, error)
}

// typeState is the per-type protocol state of one stream.
type typeState struct {
	kind       *resourceKind
	started    bool            // a request for the type was sent on this stream
	subscribed map[string]bool // non-wildcard types: names sent to the server
	nonce      string          // last response nonce
	acceptedV  string          // SotW: last accepted version_info

	// NACK hold: a control plane that re-sends a rejected version at once
	// (go-control-plane's SnapshotCache does) gets our repeated NACKs with a
	// growing delay instead of a hot loop.
	rejectKey   string
	rejectCount int
	pending     *pendingNack
}

type pendingNack struct {
	u     *update
	cause error
}

// adsClient runs ADS sessions until its context ends, reconnecting with a
// jittered backoff capped at backoffMax. Between sessions the proxy keeps
// serving the last accepted configuration.
type adsClient struct {
	p      *Proxy
	log    hclog.Logger
	client discoverygrpc.AggregatedDiscoveryServiceClient
}

func (a *adsClient) run(ctx context.Context) {
	attempt := 0
	for {
		progressed, err := a.session(ctx)
		a.p.connectedGauge.Store(0)
		if ctx.Err() != nil {
			return
		}
		if progressed {
			attempt = 0
		}
		delay := reconnectDelay(attempt)
		attempt++
		a.p.reconnects.Add(1)
		a.log.Warn("control plane stream ended; serving the last configuration and reconnecting", "error", err, "backoff", delay)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
	}
}

// reconnectDelay returns a jittered delay in [d/2, d) with d = base*2^attempt
// capped at backoffMax.
func reconnectDelay(attempt int) time.Duration {
	d := backoffBase << min(attempt, 6)
	d = min(d, backoffMax)
	return d/2 + rand.N(d/2)
}

// nackHold is the delay before re-sending the n-th identical NACK.
func nackHold(n int) time.Duration {
	if n <= 1 {
		return 0
	}
	return min(125*time.Millisecond<<min(n-1, 8), nackHoldMax)
}

func (a *adsClient) open(ctx context.Context) (adsStream, error) {
	if a.p.cfg.Token != "" {
		ctx = metadata.AppendToOutgoingContext(ctx, "x-consul-token", a.p.cfg.Token)
	}
	if a.p.cfg.Delta {
		s, err := a.client.DeltaAggregatedResources(ctx, grpc.WaitForReady(true))
		if err != nil {
			return nil, fmt.Errorf("failed to open delta ADS stream: %w", err)
		}
		return &deltaStream{s: s, node: a.p.node, store: a.p.store}, nil
	}
	s, err := a.client.StreamAggregatedResources(ctx, grpc.WaitForReady(true))
	if err != nil {
		return nil, fmt.Errorf("failed to open ADS stream: %w", err)
	}
	return &sotwStream{s: s, node: a.p.node}, nil
}

// session runs one stream. progressed reports whether a response arrived.
func (a *adsClient) session(ctx context.Context) (progressed bool, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	st, err := a.open(ctx)
	if err != nil {
		return false, err
	}
	types := map[string]*typeState{}
	for _, k := range kinds {
		types[k.typeURL] = &typeState{kind: k, subscribed: map[string]bool{}}
	}
	for _, k := range kinds {
		if !k.wildcard {
			continue
		}
		t := types[k.typeURL]
		t.acceptedV, _ = a.p.store.accepted(k.typeURL)
		if err := st.subscribe(t, []string{"*"}, nil, true); err != nil {
			return false, err
		}
		t.started = true
	}
	if err := a.syncSubscriptions(st, types); err != nil {
		return false, err
	}
	a.p.connectedGauge.Store(1)

	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	updates := make(chan *update)
	recvErr := make(chan error, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			u, err := st.recv()
			if err != nil {
				recvErr <- err
				return
			}
			select {
			case updates <- u:
			case <-ctx.Done():
				return
			}
		}
	}()
	held := make(chan string)
	for {
		select {
		case <-ctx.Done():
			return progressed, ctx.Err()
		case err := <-recvErr:
			return progressed, fmt.Errorf("failed to receive from the control plane: %w", err)
		case typeURL := <-held:
			t := types[typeURL]
			if t.pending != nil {
				p := t.pending
				t.pending = nil
				if err := st.nack(t, p.u, p.cause); err != nil {
					return progressed, err
				}
			}
		case u := <-updates:
			progressed = true
			if err := a.handle(ctx, st, types, u, held); err != nil {
				return progressed, err
			}
		}
	}
}

// handle applies (or rejects) one response and answers it.
func (a *adsClient) handle(ctx context.Context, st adsStream, types map[string]*typeState, u *update, held chan<- string) error {
	t, ok := types[u.typeURL]
	if !ok {
		a.log.Warn("ignoring a response of an unexpected type", "type", u.typeURL)
		return nil
	}
	t.pending = nil
	t.nonce = u.nonce
	var subscribed map[string]bool
	if !t.kind.wildcard {
		subscribed = t.subscribed
	}
	if err := a.p.applyUpdate(u, subscribed); err != nil {
		key := rejectKey(u)
		if key == t.rejectKey {
			t.rejectCount++
		} else {
			t.rejectKey, t.rejectCount = key, 1
		}
		hold := nackHold(t.rejectCount)
		a.log.Warn("rejected configuration (NACK)", "type", t.kind.short, "version", u.version, "error", err, "hold", hold)
		if hold == 0 {
			return st.nack(t, u, err)
		}
		t.pending = &pendingNack{u: u, cause: err}
		typeURL := u.typeURL
		time.AfterFunc(hold, func() {
			select {
			case held <- typeURL:
			case <-ctx.Done():
			}
		})
		return nil
	}
	t.rejectKey, t.rejectCount = "", 0
	t.acceptedV = u.version
	a.log.Debug("applied configuration", "type", t.kind.short, "version", u.version, "resources", len(u.resources), "removed", len(u.removed))
	if err := a.syncSubscriptions(st, types); err != nil {
		return err
	}
	return st.ack(t, u)
}

// syncSubscriptions subscribes to the EDS, RDS and SDS names the current
// configuration needs and unsubscribes (and forgets) the rest.
func (a *adsClient) syncSubscriptions(st adsStream, types map[string]*typeState) error {
	wanted := a.p.wantedNames()
	for _, k := range kinds {
		if k.wildcard {
			continue
		}
		t := types[k.typeURL]
		want := wanted[k.typeURL]
		var added, removed []string
		for n := range want {
			if !t.subscribed[n] {
				added = append(added, n)
			}
		}
		for n := range t.subscribed {
			if !want[n] {
				removed = append(removed, n)
			}
		}
		a.p.store.prune(k.typeURL, want)
		if len(added) == 0 && len(removed) == 0 {
			continue
		}
		if !t.started && len(want) == 0 {
			continue // an empty first request would mean "wildcard"
		}
		sort.Strings(added)
		sort.Strings(removed)
		t.subscribed = want
		t.acceptedV, _ = a.p.store.accepted(k.typeURL)
		if err := st.subscribe(t, added, removed, !t.started); err != nil {
			return err
		}
		t.started = true
	}
	return nil
}

// rejectKey identifies a response's content, to spot a re-sent rejection.
func rejectKey(u *update) string {
	h := sha256.New()
	fmt.Fprintf(h, "%s\x00%s\x00", u.typeURL, u.version)
	for _, r := range u.resources {
		fmt.Fprintf(h, "%s\x00%s\x00", r.name, r.version)
		h.Write(r.res.GetValue())
	}
	for _, n := range u.removed {
		fmt.Fprintf(h, "-%s\x00", n)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// errDetail is the NACK message: one line, bounded.
func errDetail(err error) string {
	msg := err.Error()
	if len(msg) > 4096 {
		msg = msg[:4096] + "..."
	}
	return msg
}
