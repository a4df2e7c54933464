package bench

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/meshstate"
	"github.com/meshlet/meshlet/rpc"
	"github.com/meshlet/meshlet/structs"
)

// Watch fan-in: a simulated client node (in the bench process, real RPC
// over mutual TLS to the area's server agent from the root namespace over
// the bench's bridge) runs fanProxies allocations, each with a service
// and its sidecar registered through PutAllocServices, and churns their
// registrations at fanChurnRate. One FollowConnect stream (the agent's
// feed: what meshlet does) and fanProxies streams (one per proxy: the
// alternative) follow the feed at the same time; each counts the batches
// it receives and their bytes as the server writes them (one JSON line
// each).

const (
	fanProxies       = 1000
	fanChurnRate     = 20 // registration changes per second
	fanChurnDuration = 10 * time.Second
	fanOpenAtOnce    = 25 // proxy streams waiting for their reset at once
	fanNodeName      = "bm-fanin"
)

// feedCounter counts one stream's batches.
type feedCounter struct {
	msgs, bytes         atomic.Int64 // change batches (not resets)
	resets, resetBytes  atomic.Int64
	rev                 atomic.Int64 // last revision received
	firstReset          chan struct{}
	firstResetCloseOnce sync.Once
	// resetSizes caches the line size of Reset batches by revision,
	// shared by the counters: a reset is the whole state at its revision,
	// so a thousand streams opened between two writes get the same one
	// and it is encoded once.
	resetSizes *sync.Map
}

func newFeedCounter(resetSizes *sync.Map) *feedCounter {
	return &feedCounter{firstReset: make(chan struct{}), resetSizes: resetSizes}
}

// add counts b as the server wrote it: its JSON line.
func (f *feedCounter) add(b meshstate.Batch) error {
	var n int
	if v, ok := f.resetSizes.Load(b.Revision); ok && b.Reset {
		n = v.(int)
	} else {
		var err error
		if n, err = BatchLineBytes(b); err != nil {
			return err
		}
		if b.Reset {
			f.resetSizes.Store(b.Revision, n)
		}
	}
	if b.Reset {
		f.resets.Add(1)
		f.resetBytes.Add(int64(n))
		f.firstResetCloseOnce.Do(func() { close(f.firstReset) })
	} else {
		f.msgs.Add(1)
		f.bytes.Add(int64(n))
	}
	f.rev.Store(b.Revision)
	return nil
}

// BatchLineBytes is the size of b's line on the feed stream (JSON and a
// newline, as rpc's feed writer sends it).
func BatchLineBytes(b meshstate.Batch) (int, error) {
	data, err := json.Marshal(&b)
	if err != nil {
		return 0, fmt.Errorf("failed to encode batch: %w", err)
	}
	return len(data) + 1, nil
}

// feedTotals sums counters: change batches and bytes, reset bytes.
func feedTotals(cs []*feedCounter) (msgs, bytes, resetBytes int64) {
	for _, c := range cs {
		msgs += c.msgs.Load()
		bytes += c.bytes.Load()
		resetBytes += c.resetBytes.Load()
	}
	return msgs, bytes, resetBytes
}

// fanResult is what the fan-in phase measured.
type fanResult struct {
	agent, proxies        [3]int64 // msgs, bytes, reset bytes
	changes               int
	window                time.Duration // the churn's duration
	resetTook             time.Duration // opening the proxy streams until all had their reset
	lag                   time.Duration // last write → every stream at the final revision
	extraResets, nodeDown int
	err                   error
}

// fanNode is the simulated client node and its RPC clients.
type fanNode struct {
	c      *meshCluster
	node   *structs.Node
	client *rpc.Client
	cfg    rpc.ClientConfig
	allocs []*structs.Allocation
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// watchFanIn runs the fan-in measurement.
func (r *Runner) watchFanIn(ctx context.Context, c *meshCluster) *fanResult {
	res := &fanResult{}
	ctx, cancel := context.WithTimeout(ctx, 150*time.Second)
	defer cancel()
	n, err := startFanNode(ctx, c)
	if err != nil {
		res.err = err
		return res
	}
	defer n.stop()
	log := r.log.Named("clustermesh")
	log.Info("watch fan-in: registering proxies", "proxies", fanProxies)
	if err := n.registerAll(ctx, 0); err != nil {
		res.err = err
		return res
	}
	fctx, fcancel := context.WithCancel(ctx)
	var fwg sync.WaitGroup
	defer func() { fcancel(); fwg.Wait() }()
	sizes := &sync.Map{}
	agent := newFeedCounter(sizes)
	if err := n.follow(fctx, &fwg, []*feedCounter{agent}, 1); err != nil {
		res.err = fmt.Errorf("agent stream: %w", err)
		return res
	}
	log.Info("opening one stream per proxy", "streams", fanProxies)
	proxies := make([]*feedCounter, fanProxies)
	for i := range proxies {
		proxies[i] = newFeedCounter(sizes)
	}
	start := time.Now()
	if err := n.follow(fctx, &fwg, proxies, fanOpenAtOnce); err != nil {
		res.err = fmt.Errorf("proxy streams: %w", err)
		return res
	}
	res.resetTook = time.Since(start)
	_, _, res.agent[2] = feedTotals([]*feedCounter{agent})
	_, _, res.proxies[2] = feedTotals(proxies)
	a0m, a0b, _ := feedTotals([]*feedCounter{agent})
	p0m, p0b, _ := feedTotals(proxies)
	log.Info("churning registrations", "rate", fanChurnRate, "duration", fanChurnDuration)
	res.changes, res.window, err = n.churn(ctx)
	if err != nil {
		res.err = err
		return res
	}
	lastWrite := time.Now()
	if err := waitRevisions(ctx, agent, proxies); err != nil {
		res.err = err
		return res
	}
	res.lag = time.Since(lastWrite)
	am, ab, _ := feedTotals([]*feedCounter{agent})
	pm, pb, _ := feedTotals(proxies)
	res.agent[0], res.agent[1] = am-a0m, ab-a0b
	res.proxies[0], res.proxies[1] = pm-p0m, pb-p0b
	for _, p := range append(proxies, agent) {
		res.extraResets += int(p.resets.Load() - 1)
	}
	if nd, _, err := c.server.api.Nodes().Info(n.node.ID, nil); err == nil && nd.Status != structs.NodeStatusReady {
		res.nodeDown++
	}
	return res
}

// startFanNode registers the simulated node, keeps it heartbeating and
// places fanProxies allocations on it (reported running).
func startFanNode(ctx context.Context, c *meshCluster) (*fanNode, error) {
	tc, err := c.clientTLS(fanNodeName)
	if err != nil {
		return nil, err
	}
	tlsCfg, err := tc.ClientTLS()
	if err != nil {
		return nil, fmt.Errorf("failed to configure RPC TLS: %w", err)
	}
	n := &fanNode{c: c, node: simNodeSpec(0)}
	n.node.Name = fanNodeName
	n.cfg = rpc.ClientConfig{Servers: []string{c.server.RPCAddr()}, TLS: tlsCfg, NodeID: n.node.ID,
		NodeSecret: n.node.SecretID, Logger: hclog.NewNullLogger(), BlockingWait: 10 * time.Second}
	if n.client, err = rpc.NewClient(n.cfg); err != nil {
		return nil, err
	}
	hctx, cancel := context.WithCancel(context.Background())
	n.cancel = cancel
	if err := n.client.RegisterNode(ctx, n.node); err != nil {
		n.stop()
		return nil, fmt.Errorf("failed to register the simulated node: %w", err)
	}
	ttl, err := n.client.Heartbeat(ctx, n.node.ID)
	if err != nil {
		n.stop()
		return nil, fmt.Errorf("failed to heartbeat the simulated node: %w", err)
	}
	n.wg.Add(1)
	go n.heartbeat(hctx, ttl)
	if err := n.place(ctx); err != nil {
		n.stop()
		return nil, err
	}
	return n, nil
}

func (n *fanNode) stop() {
	n.cancel()
	n.wg.Wait()
	n.client.Close()
}

// heartbeat heartbeats at a third of the TTL, from its own connection.
func (n *fanNode) heartbeat(ctx context.Context, ttl time.Duration) {
	defer n.wg.Done()
	hc, err := rpc.NewClient(n.cfg)
	if err != nil {
		return
	}
	defer hc.Close()
	for sleepCtx(ctx, max(ttl/3, 200*time.Millisecond)) {
		if t, err := hc.Heartbeat(ctx, n.node.ID); err == nil {
			ttl = t
		}
	}
}

// place registers the job of fanProxies allocations pinned to the node,
// waits for them and reports them running.
func (n *fanNode) place(ctx context.Context) error {
	job := clusterJob("bm-fanin", 10, fanProxies/10)
	job.Constrain(nomadapi.NewConstraint("${node.unique.name}", "=", fanNodeName))
	if _, _, err := n.c.server.api.Jobs().Register(job, nil); err != nil {
		return fmt.Errorf("failed to register the fan-in job: %w", err)
	}
	var index uint64
	for deadline := time.Now().Add(60 * time.Second); ; {
		allocs, idx, err := n.client.NodeAllocs(ctx, n.node.ID, index)
		if err != nil {
			return fmt.Errorf("failed to read the simulated node's allocations: %w", err)
		}
		index = idx
		if len(allocs) >= fanProxies {
			sort.Slice(allocs, func(i, j int) bool { return allocs[i].Name < allocs[j].Name })
			n.allocs = allocs[:fanProxies]
			return n.client.UpdateAllocs(ctx, simUpdates(allocs, map[string]string{}))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of %d fan-in allocations placed after 60s", len(allocs), fanProxies)
		}
	}
}

// fanInstances are allocation i's registrations: a service and its
// sidecar with two upstreams; gen changes the sidecar's port.
func fanInstances(nodeID string, a *structs.Allocation, i, gen int) []catalog.ServiceInstance {
	name := fmt.Sprintf("fan-svc-%03d", i%100)
	id := connect.ServiceID(a.ID, a.TaskGroup, name, "http")
	base := catalog.ServiceInstance{AllocID: a.ID, NodeID: nodeID, Datacenter: "dc1", Healthy: true,
		NodeName: fanNodeName, NodeAddress: "192.0.2.10", Address: "192.0.2.10"}
	svc, px := base, base
	svc.ID, svc.Name, svc.Port, svc.Connect = id, name, 20000+i, true
	px.ID, px.Name, px.Kind, px.Port = connect.ProxyID(id), connect.ProxyServiceName(name), catalog.KindConnectProxy, 30000+i+gen%2
	px.Proxy = &catalog.Proxy{DestinationServiceName: name, DestinationServiceID: id, LocalServiceAddress: "127.0.0.1",
		LocalServicePort: 8080, Upstreams: []catalog.Upstream{
			{DestinationName: fmt.Sprintf("fan-svc-%03d", (i+1)%100), LocalBindAddress: "127.0.0.1", LocalBindPort: 9001},
			{DestinationName: fmt.Sprintf("fan-svc-%03d", (i+2)%100), LocalBindAddress: "127.0.0.1", LocalBindPort: 9002},
		}}
	return []catalog.ServiceInstance{svc, px}
}

// registerAll writes every allocation's registrations (16 at a time).
func (n *fanNode) registerAll(ctx context.Context, gen int) error {
	sem := make(chan struct{}, 16)
	errs := make([]error, len(n.allocs))
	var wg sync.WaitGroup
	for i, a := range n.allocs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			errs[i] = n.client.PutAllocServices(ctx, a.ID, fanInstances(n.node.ID, a, i, gen))
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

// follow opens one stream per counter (each its own rpc.Client, so its own
// TLS connection), at most atOnce waiting for their reset at a time, and
// returns once every stream received its reset.
func (n *fanNode) follow(ctx context.Context, wg *sync.WaitGroup, cs []*feedCounter, atOnce int) error {
	sem := make(chan struct{}, atOnce)
	for _, fc := range cs {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		cl, err := rpc.NewClient(n.cfg)
		if err != nil {
			return err
		}
		wg.Add(2)
		go func() {
			defer wg.Done()
			defer cl.Close()
			_ = cl.FollowConnect(ctx, fc.add)
		}()
		go func() {
			defer wg.Done()
			select {
			case <-fc.firstReset:
			case <-ctx.Done():
			}
			<-sem
		}()
	}
	for _, fc := range cs {
		select {
		case <-fc.firstReset:
		case <-time.After(60 * time.Second):
			return errors.New("a stream received no reset batch within 60s")
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return nil
}

// churn changes one allocation's sidecar port per tick, fanChurnRate a
// second for fanChurnDuration, and returns how many and how long.
func (n *fanNode) churn(ctx context.Context) (int, time.Duration, error) {
	tick := time.NewTicker(time.Second / fanChurnRate)
	defer tick.Stop()
	start := time.Now()
	changes := 0
	for time.Since(start) < fanChurnDuration {
		select {
		case <-ctx.Done():
			return changes, time.Since(start), ctx.Err()
		case <-tick.C:
		}
		i := changes % len(n.allocs)
		if err := n.client.PutAllocServices(ctx, n.allocs[i].ID, fanInstances(n.node.ID, n.allocs[i], i, 1+changes/len(n.allocs))); err != nil {
			return changes, time.Since(start), fmt.Errorf("churn write %d: %w", changes, err)
		}
		changes++
	}
	return changes, time.Since(start), nil
}

// waitRevisions waits until the agent stream's revision stays put for
// 300 ms and every proxy stream reached it (20 s at most).
func waitRevisions(ctx context.Context, agent *feedCounter, proxies []*feedCounter) error {
	deadline := time.Now().Add(20 * time.Second)
	rev, stable := agent.rev.Load(), time.Now()
	for time.Now().Before(deadline) {
		if r := agent.rev.Load(); r != rev {
			rev, stable = r, time.Now()
		}
		behind := 0
		for _, p := range proxies {
			if p.rev.Load() < rev {
				behind++
			}
		}
		if behind == 0 && time.Since(stable) >= 300*time.Millisecond {
			return nil
		}
		if !sleepCtx(ctx, 5*time.Millisecond) {
			return ctx.Err()
		}
	}
	return fmt.Errorf("proxy streams had not reached revision %d 20s after the churn", rev)
}

// fanFigures: bytes and messages per second on the agent's one stream
// against one stream per proxy.
func fanFigures(f *fanResult) []*Figure {
	bytesName := fmt.Sprintf("watch fan-in with %d proxies on a client: feed bytes per second (baseline: one stream per proxy)", fanProxies)
	msgsName := fmt.Sprintf("watch fan-in with %d proxies on a client: feed messages per second (baseline: one stream per proxy)", fanProxies)
	if f.err != nil {
		return []*Figure{NotMeasured(bytesName, "B/s", f.err.Error(), nil), NotMeasured(msgsName, "1/s", f.err.Error(), nil)}
	}
	secs := f.window.Seconds()
	b := Measured(bytesName, "B/s", float64(f.agent[1])/secs, ptr(float64(f.proxies[1])/secs), nil)
	b.Note = fmt.Sprintf("%d registration changes (one allocation's sidecar port, PutAllocServices over TLS) in %.1f s; "+
		"bytes are the NDJSON lines the server writes (TLS and HTTP/2 framing not counted; keepalives, one 3-byte line "+
		"per stream per %s, not counted). The %d per-proxy streams and the agent's stream followed at the same time, each "+
		"its own TLS connection to the server; the last stream had the final revision %.0f ms after the last write. "+
		"Connecting: the agent's reset was %s; the %d per-proxy resets %s in all, %.1f s to open them (%d at a time).",
		f.changes, secs, rpc.ConnectKeepalive, fanProxies, ms(f.lag), fmtBytes(f.agent[2]), fanProxies,
		fmtBytes(f.proxies[2]), f.resetTook.Seconds(), fanOpenAtOnce)
	if f.extraResets > 0 || f.nodeDown > 0 {
		b.Note += fmt.Sprintf(" Streams restarted with a new reset %d times; simulated node down: %d.", f.extraResets, f.nodeDown)
	}
	m := Measured(msgsName, "1/s", float64(f.agent[0])/secs, ptr(float64(f.proxies[0])/secs), nil)
	m.Note = fmt.Sprintf("change batches (%d on the agent's stream, %d over the %d per-proxy streams) per second of churn at %d "+
		"changes/s; a batch is one etcd watch response, so several changes may share one: %.1f changes per batch on the "+
		"agent's stream, %.1f per batch on a per-proxy stream (the server's watches fall behind while it serves %d streams).",
		f.agent[0], f.proxies[0], fanProxies, fanChurnRate, perBatch(f.changes, f.agent[0]), perBatch(f.changes*fanProxies, f.proxies[0]), fanProxies+1)
	return []*Figure{b, m}
}

// fmtBytes prints a byte count in KiB or MiB.
func fmtBytes(n int64) string {
	if n >= 1<<20 {
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
}

// perBatch is changes per batch; 0 without batches.
func perBatch(changes int, batches int64) float64 {
	if batches == 0 {
		return 0
	}
	return float64(changes) / float64(batches)
}
