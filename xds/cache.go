package xds

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"sync"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/hashicorp/go-hclog"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// errFetchUnsupported: REST/unary fetch is not served.
var errFetchUnsupported = errors.New("xDS fetch is not supported; use ADS")

// entry is one published resource, marshalled once and shared, immutable,
// by every response that carries it.
type entry struct {
	name    string
	version string // content hash
	msg     proto.Message
	any     *anypb.Any
	res     *discovery.Resource // delta form
}

func newEntry(typeURL, name string, m proto.Message) (*entry, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("failed to marshal %s %q: %w", typeURL, name, err)
	}
	sum := sha256.Sum256(b)
	v := hex.EncodeToString(sum[:12])
	a := &anypb.Any{TypeUrl: typeURL, Value: b}
	return &entry{name: name, version: v, msg: m, any: a, res: &discovery.Resource{Name: name, Version: v, Resource: a}}, nil
}

// op sets (msg != nil) or deletes one resource; node "" is the shared table.
type op struct {
	node string
	name string
	msg  proto.Message
}

// watch is one open xDS watch: one stream, one type. It fires at most once.
type watch struct {
	id       uint64
	typeURL  string
	node     string
	wildcard bool
	names    []string
	sub      cache.Subscription
	req      *discovery.DiscoveryRequest // sotw
	out      chan cache.Response
	dreq     *discovery.DeltaDiscoveryRequest // delta
	dout     chan cache.DeltaResponse
	reply    bool // parked before its first answer (warmup.go)
}

type watchSet map[uint64]*watch

// xdsCache implements cache.Cache over a shared and a per-node table.
// Lock rule: every method takes mu; unexported helpers expect it held.
type xdsCache struct {
	mu      sync.Mutex
	version uint64
	shared  map[string]map[string]*entry            // type -> name
	nodes   map[string]map[string]map[string]*entry // type -> node -> name
	byName  map[string]map[string]watchSet          // type -> name -> watches
	byNode  map[string]map[string]watchSet          // type -> node -> wildcard watches
	nextID  uint64
	log     hclog.Logger
	// expected tells the registered connect proxies; waiting holds their
	// watches until their resources are built (warmup.go). Set before use.
	expected func(node string) bool
	waiting  map[string]watchSet // node -> watches
	// done holds the proxies whose resources were published, even with
	// no listener (warmup.go).
	done map[string]bool
}

var _ cache.Cache = (*xdsCache)(nil)

func newCache(log hclog.Logger) *xdsCache {
	return &xdsCache{
		shared:  map[string]map[string]*entry{},
		nodes:   map[string]map[string]map[string]*entry{},
		byName:  map[string]map[string]watchSet{},
		byNode:  map[string]map[string]watchSet{},
		waiting: map[string]watchSet{},
		done:    map[string]bool{},
		log:     log,
	}
}

// bump starts a new published version and returns it.
func (c *xdsCache) bump() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.version++
	return c.version
}

// currentVersion is the version the next response will carry.
func (c *xdsCache) currentVersion() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.version
}

// publish applies ops of one type and wakes exactly the watches they
// concern. Resources whose content did not change are not re-sent.
func (c *xdsCache) publish(typeURL string, ops []op) error {
	entries := make([]*entry, len(ops))
	for i, o := range ops {
		if o.msg == nil {
			continue
		}
		e, err := newEntry(typeURL, o.name, o.msg)
		if err != nil {
			return err
		}
		entries[i] = e
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	woken := watchSet{}
	for i, o := range ops {
		if !c.apply(typeURL, o, entries[i]) {
			continue
		}
		for id, w := range c.byName[typeURL][o.name] {
			woken[id] = w
		}
		if o.node != "" {
			for id, w := range c.byNode[typeURL][o.node] {
				woken[id] = w
			}
		}
	}
	for _, w := range woken {
		if c.respond(w, false) {
			c.untrack(w)
		}
	}
	if typeURL == listenerType {
		for _, o := range ops {
			if o.node != "" {
				c.built(o.node)
			}
		}
	}
	return nil
}

// apply stores or deletes one resource and reports whether anything changed.
func (c *xdsCache) apply(typeURL string, o op, e *entry) bool {
	table := c.shared[typeURL]
	if o.node != "" {
		byNode := c.nodes[typeURL]
		if byNode == nil {
			byNode = map[string]map[string]*entry{}
			c.nodes[typeURL] = byNode
		}
		table = byNode[o.node]
		if table == nil && e != nil {
			table = map[string]*entry{}
			byNode[o.node] = table
		}
	} else if table == nil {
		table = map[string]*entry{}
		c.shared[typeURL] = table
	}
	old := table[o.name]
	if e == nil {
		if old == nil {
			return false
		}
		delete(table, o.name)
		if o.node != "" && len(table) == 0 {
			delete(c.nodes[typeURL], o.node)
		}
		return true
	}
	if old != nil && old.version == e.version {
		return false
	}
	table[o.name] = e
	return true
}

// lookup resolves a name for a node: its own resources first, then shared.
func (c *xdsCache) lookup(typeURL, node, name string) *entry {
	if e := c.nodes[typeURL][node][name]; e != nil {
		return e
	}
	return c.shared[typeURL][name]
}

// visible resolves name as w sees it: for a wildcard watch the node's own
// resources, plus every explicitly subscribed name that exists.
func (c *xdsCache) visible(w *watch, name string) *entry {
	if w.wildcard {
		if e := c.nodes[w.typeURL][w.node][name]; e != nil {
			return e
		}
	}
	if _, ok := w.sub.SubscribedResources()[name]; ok {
		return c.lookup(w.typeURL, w.node, name)
	}
	return nil
}

// respond sends w what changed since the stream last received this type,
// or everything when reply is set. A resource counts as received when it
// was sent, ACKed or not: that is what stops the NACK re-send loop.
func (c *xdsCache) respond(w *watch, reply bool) bool {
	if c.awaitingBuild(w) {
		c.wait(w, reply)
		return false
	}
	known := w.sub.ReturnedResources()
	var all, changed []*entry
	visit := func(e *entry) {
		all = append(all, e)
		if v, ok := known[e.name]; !ok || v != e.version {
			changed = append(changed, e)
		}
	}
	own := c.nodes[w.typeURL][w.node]
	if w.wildcard {
		for _, e := range own {
			visit(e)
		}
	}
	for n := range w.sub.SubscribedResources() {
		if w.wildcard && own[n] != nil {
			continue
		}
		if e := c.lookup(w.typeURL, w.node, n); e != nil {
			visit(e)
		}
	}
	var removed []string
	for n := range known {
		if c.visible(w, n) == nil {
			removed = append(removed, n)
		}
	}
	if len(changed) == 0 && len(removed) == 0 && !reply {
		return false
	}
	send := changed
	if w.dout == nil && cache.ResourceRequiresFullStateInSotw(w.typeURL) {
		send = all
	} else if w.dout == nil && len(changed) == 0 && !reply {
		return false // sotw cannot express an EDS/SDS removal
	}
	sort.Slice(send, func(i, j int) bool { return send[i].name < send[j].name })
	sort.Strings(removed)
	returned := make(map[string]string, len(known)+len(send))
	for n, v := range known {
		returned[n] = v
	}
	for _, e := range send {
		returned[e.name] = e.version
	}
	for _, n := range removed {
		delete(returned, n)
	}
	return c.send(w, send, removed, returned)
}

func (c *xdsCache) send(w *watch, send []*entry, removed []string, returned map[string]string) bool {
	ver := strconv.FormatUint(c.version, 10)
	if w.dout != nil {
		res := make([]*discovery.Resource, len(send))
		for i, e := range send {
			res[i] = e.res
		}
		resp := &cache.DeltaPassthroughResponse{
			DeltaRequest:   w.dreq,
			NextVersionMap: returned,
			DeltaDiscoveryResponse: &discovery.DeltaDiscoveryResponse{
				SystemVersionInfo: ver, TypeUrl: w.typeURL, Resources: res, RemovedResources: removed,
			},
		}
		select {
		case w.dout <- resp:
			return true
		default:
			c.log.Error("delta response channel full; update deferred to the next change", "node_id", w.node, "type", w.typeURL)
			return false
		}
	}
	anys := make([]*anypb.Any, len(send))
	for i, e := range send {
		anys[i] = e.any
	}
	resp := &cache.PassthroughResponse{
		Request:           w.req,
		ReturnedResources: returned,
		DiscoveryResponse: &discovery.DiscoveryResponse{VersionInfo: ver, TypeUrl: w.typeURL, Resources: anys},
	}
	select {
	case w.out <- resp:
		return true
	default:
		c.log.Error("response channel full; update deferred to the next change", "node_id", w.node, "type", w.typeURL)
		return false
	}
}

func (c *xdsCache) track(w *watch) func() {
	c.nextID++
	w.id = c.nextID
	for n := range w.sub.SubscribedResources() {
		w.names = append(w.names, n)
	}
	if w.wildcard {
		addWatch(c.byNode, w.typeURL, w.node, w)
	}
	for _, n := range w.names {
		addWatch(c.byName, w.typeURL, n, w)
	}
	return func() {
		c.mu.Lock()
		c.untrack(w)
		c.mu.Unlock()
	}
}

func addWatch(idx map[string]map[string]watchSet, typeURL, key string, w *watch) {
	byKey := idx[typeURL]
	if byKey == nil {
		byKey = map[string]watchSet{}
		idx[typeURL] = byKey
	}
	set := byKey[key]
	if set == nil {
		set = watchSet{}
		byKey[key] = set
	}
	set[w.id] = w
}

func removeWatch(idx map[string]map[string]watchSet, typeURL, key string, id uint64) {
	set := idx[typeURL][key]
	delete(set, id)
	if len(set) == 0 {
		delete(idx[typeURL], key)
	}
}

// untrack is idempotent: a fired watch may be cancelled again by the server.
func (c *xdsCache) untrack(w *watch) {
	c.unwait(w)
	if w.wildcard {
		removeWatch(c.byNode, w.typeURL, w.node, w.id)
	}
	for _, n := range w.names {
		removeWatch(c.byName, w.typeURL, n, w.id)
	}
}

// CreateWatch implements cache.ConfigWatcher for state-of-the-world. A
// first request (no version, no error) is always answered, even when empty,
// so clients finish initialising; a NACK is never answered by itself.
func (c *xdsCache) CreateWatch(req *cache.Request, sub cache.Subscription, out chan cache.Response) (func(), error) {
	if req.GetTypeUrl() == resource.AnyType {
		return nil, fmt.Errorf("failed to create watch: %w", errMissingType)
	}
	w := &watch{typeURL: req.GetTypeUrl(), node: req.GetNode().GetId(), wildcard: sub.IsWildcard(), sub: sub, req: req, out: out}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.respond(w, req.GetVersionInfo() == "" && req.GetErrorDetail() == nil) {
		return func() {}, nil
	}
	return c.track(w), nil
}

// CreateDeltaWatch implements cache.ConfigWatcher for delta xDS. The first
// request of a wildcard subscription is always answered.
func (c *xdsCache) CreateDeltaWatch(req *cache.DeltaRequest, sub cache.Subscription, out chan cache.DeltaResponse) (func(), error) {
	if req.GetTypeUrl() == resource.AnyType {
		return nil, fmt.Errorf("failed to create delta watch: %w", errMissingType)
	}
	w := &watch{typeURL: req.GetTypeUrl(), node: req.GetNode().GetId(), wildcard: sub.IsWildcard(), sub: sub, dreq: req, dout: out}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.respond(w, sub.IsWildcard() && req.GetResponseNonce() == "" && req.GetErrorDetail() == nil) {
		return func() {}, nil
	}
	return c.track(w), nil
}

// Fetch implements cache.ConfigFetcher; only streaming xDS is served.
func (c *xdsCache) Fetch(context.Context, *cache.Request) (cache.Response, error) {
	return nil, errFetchUnsupported
}

var errMissingType = errors.New("request has no type URL")

// get returns a published resource (node "" for shared), or nil.
func (c *xdsCache) get(typeURL, node, name string) proto.Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	var e *entry
	if node == "" {
		e = c.shared[typeURL][name]
	} else {
		e = c.nodes[typeURL][node][name]
	}
	if e == nil {
		return nil
	}
	return e.msg
}

// has reports whether name resolves for node (own table, then shared).
func (c *xdsCache) has(typeURL, node, name string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lookup(typeURL, node, name) != nil
}

// names lists a node's own resources of a type (node "" for shared).
func (c *xdsCache) names(typeURL, node string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	table := c.shared[typeURL]
	if node != "" {
		table = c.nodes[typeURL][node]
	}
	out := make([]string, 0, len(table))
	for n := range table {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// count is the number of resources of a type across both tables.
func (c *xdsCache) count(typeURL string) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := len(c.shared[typeURL])
	for _, t := range c.nodes[typeURL] {
		n += len(t)
	}
	return n
}
