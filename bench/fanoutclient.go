package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	core "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/meshlet/meshlet/xds"
)

// fanoutDialing bounds how many simulated proxies connect at once (the
// listen backlog is finite; a real fleet does not start in one instant).
const fanoutDialing = 256

// fanoutTypes are the types a simulated proxy subscribes to, in ADS order.
var fanoutTypes = []string{resource.ClusterType, resource.EndpointType, resource.ListenerType, resource.SecretType}

// ErrFanoutClients is returned when a simulated proxy fails before it is
// configured.
var ErrFanoutClients = errors.New("simulated proxies failed")

// FanoutClientOptions configure StartFanoutClients.
type FanoutClientOptions struct {
	Addr        string // the xDS server, host:port on 127.0.0.1
	TrustDomain string // the server CA's trust domain
	Proxies     int
	Delta       bool // delta xDS (the built-in proxy); false: state of the world
}

// FanoutClients are N simulated proxies, each its own gRPC connection and
// node ID, like N sidecars. Each subscribes to clusters, its 3 upstreams'
// endpoints, listeners and its secrets, and ACKs every response.
type FanoutClients struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	conns   []*grpc.ClientConn
	Connect time.Duration // until every proxy had received and ACKed all 4 types
}

// StartFanoutClients connects every simulated proxy and returns once each
// has received and ACKed its initial config (or with the first failure).
// The streams stay open until Close.
func StartFanoutClients(ctx context.Context, o FanoutClientOptions) (*FanoutClients, error) {
	if o.Proxies < 1 || o.Addr == "" || o.TrustDomain == "" {
		return nil, fmt.Errorf("failed to start simulated proxies: need proxies >= 1, an address and a trust domain")
	}
	ctx, cancel := context.WithCancel(ctx)
	c := &FanoutClients{cancel: cancel}
	start := time.Now()
	ready := make(chan error, o.Proxies)
	slots := make(chan struct{}, fanoutDialing)
	for i := 0; i < o.Proxies; i++ {
		conn, err := grpc.NewClient(o.Addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
			grpc.WithReadBufferSize(8<<10), grpc.WithWriteBufferSize(8<<10))
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("failed to create gRPC client: %w", err)
		}
		c.conns = append(c.conns, conn)
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			runFanoutProxy(ctx, conn, i, o, slots, ready)
		}()
	}
	guard := time.NewTimer(fanoutHangGuard)
	defer guard.Stop()
	for n := 0; n < o.Proxies; n++ {
		select {
		case err := <-ready:
			if err != nil {
				c.Close()
				return nil, fmt.Errorf("%w: %d of %d configured: %w", ErrFanoutClients, n, o.Proxies, err)
			}
		case <-guard.C:
			c.Close()
			return nil, fmt.Errorf("%w: %d of %d configured after %s", ErrFanoutClients, n, o.Proxies, fanoutHangGuard)
		}
	}
	c.Connect = time.Since(start)
	return c, nil
}

// Close ends every stream and connection and waits for the proxies.
func (c *FanoutClients) Close() {
	c.cancel()
	c.wg.Wait()
	for _, conn := range c.conns {
		_ = conn.Close()
	}
}

// fanoutStream is the part of a SotW or delta ADS stream a proxy uses.
type fanoutStream struct {
	subscribe func(typeURL string, names []string) error
	// recvAck receives one response, ACKs it and returns its type.
	recvAck func() (string, error)
}

// runFanoutProxy runs simulated proxy i: it holds a dialing slot until it
// is configured, reports that (or its failure) once on ready, then keeps
// ACKing until ctx ends.
func runFanoutProxy(ctx context.Context, conn *grpc.ClientConn, i int, o FanoutClientOptions, slots chan struct{}, ready chan<- error) {
	select {
	case slots <- struct{}{}:
	case <-ctx.Done():
		ready <- ctx.Err()
		return
	}
	release := func() { <-slots }
	id, service, upstreams := fanoutProxy(i)
	names := map[string][]string{resource.SecretType: {xds.LeafSecretName(service), xds.RootsSecret}}
	for _, u := range upstreams {
		names[resource.EndpointType] = append(names[resource.EndpointType], xds.ClusterName(u, fanoutDC, o.TrustDomain))
	}
	st, err := openFanoutStream(ctx, conn, &core.Node{Id: id, Cluster: service}, o.Delta, names)
	if err == nil {
		for _, t := range fanoutTypes {
			if err = st.subscribe(t, names[t]); err != nil {
				break
			}
		}
	}
	got := map[string]bool{}
	for err == nil && len(got) < len(fanoutTypes) {
		var t string
		if t, err = st.recvAck(); err == nil {
			got[t] = true
		}
	}
	release()
	if err != nil {
		ready <- fmt.Errorf("proxy %s: %w", id, err)
		return
	}
	ready <- nil
	for {
		if _, err := st.recvAck(); err != nil {
			return // ctx ended (or the server went away): nothing left to measure
		}
	}
}

// openFanoutStream opens one ADS stream; the node is sent on the first request.
func openFanoutStream(ctx context.Context, conn *grpc.ClientConn, node *core.Node, delta bool, names map[string][]string) (*fanoutStream, error) {
	cl := discovery.NewAggregatedDiscoveryServiceClient(conn)
	if delta {
		st, err := cl.DeltaAggregatedResources(ctx)
		if err != nil {
			return nil, fmt.Errorf("failed to open delta ADS stream: %w", err)
		}
		return &fanoutStream{
			subscribe: func(t string, names []string) error {
				return st.Send(&discovery.DeltaDiscoveryRequest{Node: node, TypeUrl: t, ResourceNamesSubscribe: names})
			},
			recvAck: func() (string, error) {
				r, err := st.Recv()
				if err != nil {
					return "", err
				}
				return r.GetTypeUrl(), st.Send(&discovery.DeltaDiscoveryRequest{TypeUrl: r.GetTypeUrl(), ResponseNonce: r.GetNonce()})
			},
		}, nil
	}
	st, err := cl.StreamAggregatedResources(ctx)
	if err != nil {
		return nil, fmt.Errorf("failed to open ADS stream: %w", err)
	}
	return &fanoutStream{
		subscribe: func(t string, names []string) error {
			return st.Send(&discovery.DiscoveryRequest{Node: node, TypeUrl: t, ResourceNames: names})
		},
		recvAck: func() (string, error) {
			r, err := st.Recv()
			if err != nil {
				return "", err
			}
			t := r.GetTypeUrl()
			return t, st.Send(&discovery.DiscoveryRequest{TypeUrl: t, ResourceNames: names[t], VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()})
		},
	}, nil
}
