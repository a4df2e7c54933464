package sidecar

import (
	"fmt"
	"sort"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discoverygrpc "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc/codes"
)

const typeDiscoveryResource = "type.googleapis.com/envoy.service.discovery.v3.Resource"

func nackStatus(cause error) *status.Status {
	return &status.Status{Code: int32(codes.InvalidArgument), Message: errDetail(cause)}
}

// deltaStream speaks incremental xDS.
type deltaStream struct {
	s        discoverygrpc.AggregatedDiscoveryService_DeltaAggregatedResourcesClient
	node     *corev3.Node
	store    *store
	nodeSent bool
}

func (d *deltaStream) send(req *discoverygrpc.DeltaDiscoveryRequest) error {
	if !d.nodeSent {
		req.Node = d.node
		d.nodeSent = true
	}
	if err := d.s.Send(req); err != nil {
		return fmt.Errorf("failed to send delta request: %w", err)
	}
	return nil
}

func (d *deltaStream) subscribe(t *typeState, added, removed []string, first bool) error {
	req := &discoverygrpc.DeltaDiscoveryRequest{
		TypeUrl:                  t.kind.typeURL,
		ResourceNamesSubscribe:   added,
		ResourceNamesUnsubscribe: removed,
	}
	if first {
		// Resume: tell the server what we already have so it sends only
		// changes (and removals).
		have := d.store.versionsOf(t.kind.typeURL)
		if !t.kind.wildcard {
			for name := range have {
				if !t.subscribed[name] {
					delete(have, name)
				}
			}
		}
		if len(have) > 0 {
			req.InitialResourceVersions = have
		}
	}
	return d.send(req)
}

func (d *deltaStream) ack(t *typeState, u *update) error {
	return d.send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: t.kind.typeURL, ResponseNonce: u.nonce})
}

func (d *deltaStream) nack(t *typeState, u *update, cause error) error {
	return d.send(&discoverygrpc.DeltaDiscoveryRequest{TypeUrl: t.kind.typeURL, ResponseNonce: u.nonce, ErrorDetail: nackStatus(cause)})
}

func (d *deltaStream) recv() (*update, error) {
	resp, err := d.s.Recv()
	if err != nil {
		return nil, err
	}
	u := &update{typeURL: resp.GetTypeUrl(), version: resp.GetSystemVersionInfo(), nonce: resp.GetNonce(), removed: resp.GetRemovedResources()}
	for _, r := range resp.GetResources() {
		if r.GetResource() == nil {
			continue // a TTL heartbeat: the resource is unchanged
		}
		u.resources = append(u.resources, rawResource{name: r.GetName(), version: r.GetVersion(), res: r.GetResource()})
	}
	return u, nil
}

// sotwStream speaks state-of-the-world xDS.
type sotwStream struct {
	s        discoverygrpc.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	node     *corev3.Node
	nodeSent bool
}

func (s *sotwStream) send(t *typeState, version, nonce string, detail *status.Status) error {
	req := &discoverygrpc.DiscoveryRequest{
		TypeUrl:       t.kind.typeURL,
		VersionInfo:   version,
		ResponseNonce: nonce,
		ErrorDetail:   detail,
	}
	if !t.kind.wildcard {
		req.ResourceNames = sortedNames(t.subscribed)
	}
	if !s.nodeSent {
		req.Node = s.node
		s.nodeSent = true
	}
	if err := s.s.Send(req); err != nil {
		return fmt.Errorf("failed to send discovery request: %w", err)
	}
	return nil
}

func (s *sotwStream) subscribe(t *typeState, _, _ []string, _ bool) error {
	return s.send(t, t.acceptedV, t.nonce, nil)
}

func (s *sotwStream) ack(t *typeState, u *update) error {
	return s.send(t, u.version, u.nonce, nil)
}

func (s *sotwStream) nack(t *typeState, u *update, cause error) error {
	return s.send(t, t.acceptedV, u.nonce, nackStatus(cause))
}

func (s *sotwStream) recv() (*update, error) {
	resp, err := s.s.Recv()
	if err != nil {
		return nil, err
	}
	k := kindOf(resp.GetTypeUrl())
	u := &update{typeURL: resp.GetTypeUrl(), version: resp.GetVersionInfo(), nonce: resp.GetNonce(), full: k != nil && k.wildcard}
	for _, a := range resp.GetResources() {
		res := a
		if a.GetTypeUrl() == typeDiscoveryResource {
			// A TTL wrapper: unwrap it.
			var wrapped discoverygrpc.Resource
			if err := a.UnmarshalTo(&wrapped); err == nil && wrapped.GetResource() != nil {
				res = wrapped.GetResource()
			}
		}
		u.resources = append(u.resources, rawResource{res: res})
	}
	return u, nil
}

func sortedNames(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for n := range m {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}
