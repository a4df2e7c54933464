// Package client is meshlet's client role: it fingerprints the node
// (drivers, attributes), registers it with the server, watches the server
// for the node's allocations and runs an alloc runner per allocation,
// reporting their status back. On start it first restores the allocations
// found in its local state (client/state), so tasks that kept running while
// the agent was down are recovered rather than started again, and it
// garbage-collects network namespaces of allocations that are gone.
//
// The client reaches the server only through ServerConn, so a network can
// later sit between the two roles.
//
// Concurrency: one goroutine watches the server and reconciles runners,
// one sends status updates; the mutex guards the runner map and the
// pending updates. Runners run in their own goroutines.
package client

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/client/allocdir"
	"github.com/meshlet/meshlet/client/allocrunner"
	clientstate "github.com/meshlet/meshlet/client/state"
	"github.com/meshlet/meshlet/client/template"
	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/structs"
)

// Sentinel errors.
var (
	ErrAllocNotFound  = errors.New("allocation not found on this node")
	ErrTaskNotFound   = errors.New("task not found in allocation")
	ErrTaskNotRunning = errors.New("task is not running")
)

// ServerConn is the client's narrow view of the server role.
type ServerConn interface {
	RegisterNode(ctx context.Context, node *structs.Node) error
	// NodeAllocs blocks until the server's index passes minIndex and returns
	// the node's allocations with the index they reflect.
	NodeAllocs(ctx context.Context, nodeID string, minIndex uint64) ([]*structs.Allocation, uint64, error)
	UpdateAllocs(ctx context.Context, updates []*structs.Allocation) error
	// Heartbeat tells the server the node is alive and returns when to
	// send the next one.
	Heartbeat(ctx context.Context, nodeID string) (time.Duration, error)
}

// Networker is the network hook's Networker plus garbage collection;
// *cni.Manager implements it.
type Networker interface {
	allocrunner.Networker
	// GC removes the networks left by allocations for which live returns
	// false; it asks again, under the allocation's lock, before removing
	// one.
	GC(ctx context.Context, live func(allocID string) bool) error
}

// HookFactory returns the hooks that run after the network hook for an
// allocation (sidecar, services — added by the connect integration).
type HookFactory func(alloc *structs.Allocation) []allocrunner.AllocHook

// Config configures a Client.
type Config struct {
	// DataDir holds client/state.db and alloc/<id>/.
	DataDir    string
	NodeName   string
	Datacenter string
	NodeMeta   map[string]string
	// Drivers are the task drivers of this node.
	Drivers []driver.Driver
	// Networker may be nil; NetworkUnavailable then says why bridge
	// networking cannot be used.
	Networker          Networker
	NetworkUnavailable string
	Hooks              HookFactory
	Server             ServerConn
	// Version and BinaryPath become the meshlet.version and meshlet.binary
	// node attributes (BinaryPath defaults to the running executable).
	Version    string
	BinaryPath string
	// Attributes are extra node attributes (e.g. meshlet.sidecar).
	Attributes map[string]string
	HTTPAddr   string
	// HTTPTLS says HTTPAddr serves HTTPS (the node's TLSEnabled).
	HTTPTLS bool
	// Reserved is what the node keeps for itself (reserved { cpu memory
	// disk }); nil reserves nothing.
	Reserved *structs.NodeReservedResources
	// TemplateCatalog is the service data task templates read (the
	// agent's catalog); nil makes their service functions fail.
	TemplateCatalog template.Catalog
	Logger          hclog.Logger
	// GCMaxAllocs, GCAllocTTL and GCInterval bound how many terminal
	// allocations (runner, alloc dir, logs) the client keeps, and for how
	// long (see gc.go); zero means the default.
	GCMaxAllocs int
	GCAllocTTL  time.Duration
	// MaxKillTimeout caps every task's kill_timeout (Nomad's
	// max_kill_timeout); zero: DefaultMaxKillTimeout.
	MaxKillTimeout time.Duration
	GCInterval     time.Duration
	// GCDiskUsageThreshold is the percentage of the data dir's filesystem
	// in use above which terminal allocations are collected, oldest first,
	// until usage is under it (Nomad's gc_disk_usage_threshold); zero means
	// the default 80.
	GCDiskUsageThreshold float64
	// DiskUsage reports the data dir's filesystem usage in percent; nil
	// uses statfs (tests replace it).
	DiskUsage func() (float64, error)
}

// Client is the client role.
type Client struct {
	cfg     Config
	logger  hclog.Logger
	db      *clientstate.DB
	node    *structs.Node
	drivers map[string]driver.Driver
	// secretID authenticates the node to the servers (with its certificate).
	secretID string

	mu       sync.Mutex
	runners  map[string]*allocrunner.AllocRunner
	seen     map[string]uint64 // alloc ID → last AllocModifyIndex acted on
	pending  map[string]*structs.Allocation
	updateCh chan struct{}
	// serverTerminal: the server's copy of the allocation is terminal (it
	// has the final status), so the client may garbage-collect it.
	serverTerminal map[string]bool
	// collected: garbage-collected allocations the server still lists;
	// they must not be run again.
	collected map[string]bool
	// destroying: runners the server forgot, taken out of runners, whose
	// destroy (the stop of their tasks first) has not finished.
	destroying map[string]*allocrunner.AllocRunner
	// unrestored: allocations in the client state that restore could not
	// run (see settleUnrestored); watch goroutine only once it started.
	unrestored map[string]bool

	// networkGCTimeout bounds gcNetworks; a field so tests can shorten it
	// (before Start).
	networkGCTimeout time.Duration

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New opens the client state, loads or creates the node ID and
// fingerprints the node. Nothing runs until Start.
func New(cfg Config) (*Client, error) {
	if cfg.Server == nil || cfg.DataDir == "" {
		return nil, fmt.Errorf("failed to create client: server connection and data dir are required")
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.GCMaxAllocs <= 0 {
		cfg.GCMaxAllocs = DefaultGCMaxAllocs
	}
	if cfg.MaxKillTimeout <= 0 {
		cfg.MaxKillTimeout = DefaultMaxKillTimeout
	}
	if cfg.GCAllocTTL <= 0 {
		cfg.GCAllocTTL = DefaultGCAllocTTL
	}
	if cfg.GCInterval <= 0 {
		cfg.GCInterval = DefaultGCInterval
	}
	if cfg.GCDiskUsageThreshold <= 0 {
		cfg.GCDiskUsageThreshold = DefaultGCDiskUsageThreshold
	}
	if cfg.DiskUsage == nil {
		dir := cfg.DataDir
		cfg.DiskUsage = func() (float64, error) { return diskUsage(dir) }
	}
	statePath := filepath.Join(cfg.DataDir, "client", "state.db")
	db, err := clientstate.Open(statePath)
	if err != nil {
		return nil, err
	}
	nodeID, err := db.NodeID()
	if err == nil && nodeID == "" {
		err = checkNoAllocDirs(filepath.Join(cfg.DataDir, "alloc"), statePath)
		if err == nil {
			nodeID = uuid.NewString()
			err = db.PutNodeID(nodeID)
		}
	}
	if err != nil {
		_ = db.Close()
		return nil, fmt.Errorf("failed to load node ID: %w", err)
	}
	secret, err := nodeSecret(db)
	if err != nil {
		_ = db.Close()
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{cfg: cfg, logger: cfg.Logger, db: db, drivers: map[string]driver.Driver{},
		runners: map[string]*allocrunner.AllocRunner{}, seen: map[string]uint64{}, pending: map[string]*structs.Allocation{},
		updateCh: make(chan struct{}, 1), serverTerminal: map[string]bool{}, collected: map[string]bool{},
		destroying: map[string]*allocrunner.AllocRunner{}, ctx: ctx, cancel: cancel, secretID: secret, networkGCTimeout: defaultNetworkGCTimeout}
	for _, d := range cfg.Drivers {
		c.drivers[d.Name()] = d
	}
	c.node = c.fingerprint(ctx, nodeID)
	c.logger = c.logger.With("node_id", nodeID)
	return c, nil
}

// nodeSecret loads the node's secret, making one on its first start.
func nodeSecret(db *clientstate.DB) (string, error) {
	secret, err := db.NodeSecret()
	if err == nil && secret == "" {
		secret = uuid.NewString()
		err = db.PutNodeSecret(secret)
	}
	if err != nil {
		return "", fmt.Errorf("failed to load node secret: %w", err)
	}
	return secret, nil
}

// checkNoAllocDirs refuses to start a new node on a data dir whose alloc/
// holds allocation directories: the client state that ran them is gone
// (deleted with its marker, or written before markers existed), and
// starting afresh would orphan their tasks and tear their networks down.
func checkNoAllocDirs(allocRoot, statePath string) error {
	entries, err := os.ReadDir(allocRoot)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("failed to read %s: %w", allocRoot, err)
	}
	var n int
	for _, e := range entries {
		if e.IsDir() {
			n++
		}
	}
	if n == 0 {
		return nil
	}
	return fmt.Errorf("%w: %s holds no node but %s holds %d allocation directories; %s", clientstate.ErrStateLost,
		statePath, allocRoot, n, clientstate.RecoveryHint(statePath))
}

// Node returns a copy of the fingerprinted node.
func (c *Client) Node() *structs.Node {
	cp := *c.node
	return &cp
}

// defaultNetworkGCTimeout bounds the garbage collection of allocation
// networks at start (each allocation's teardown is bounded by the
// Networker too).
const defaultNetworkGCTimeout = 2 * time.Minute

// Start restores allocations from the client state, starts the garbage
// collection of dead allocations' networks, registers the node and starts
// watching the server.
func (c *Client) Start() error {
	unrestored, err := c.restore()
	if err != nil {
		return err
	}
	// The GC removes the networks of allocations the client does not run:
	// with an allocation that could not be restored, it would tear down a
	// running allocation's network. It waits for the servers then.
	if len(unrestored) > 0 {
		c.unrestored = unrestored
		c.logger.Warn("deferring the garbage collection of allocation networks until the servers list this node's allocations: some could not be restored", "count", len(unrestored))
	} else {
		c.collectLeftovers()
	}
	if err := c.register(registerWait); err != nil {
		// The servers are away (starting, electing, unreachable): keep
		// trying in the background, as Nomad's clients do; the node's
		// allocations keep running meanwhile.
		c.logger.Warn("node not registered yet; retrying in the background", "error", err)
		c.wg.Add(1)
		go func() {
			defer c.wg.Done()
			if c.register(0) == nil {
				c.logger.Info("node registered", "node_name", c.node.Name, "drivers", len(c.drivers))
			}
		}()
	} else {
		c.logger.Info("node registered", "node_name", c.node.Name, "drivers", len(c.drivers))
	}
	c.wg.Add(4)
	go c.heartbeat()
	go c.watch()
	go c.sendUpdates()
	go c.gcLoop()
	return nil
}

// collectLeftovers removes what allocations the client does not run left
// behind: their networks (in the background) and their drivers' tasks.
func (c *Client) collectLeftovers() {
	c.wg.Add(1)
	go c.gcNetworks()
	c.sweepDrivers()
}

// settleUnrestored is the watch's, after its first reconcile: of the
// allocations restore could not run, those the servers sent again now
// have runners; the others the servers no longer have (or have finished),
// so their entries are forgotten, which nothing else would do, and the
// networks and tasks left behind are collected at last. Until an entry can
// be forgotten, the collection stays off.
func (c *Client) settleUnrestored() {
	for id := range c.unrestored {
		if c.runner(id) != nil {
			delete(c.unrestored, id)
			continue
		}
		if err := c.db.DeleteAlloc(id); err != nil {
			c.logger.Error("failed to forget an allocation the client could not restore; allocation networks are not garbage-collected", "alloc_id", id, "error", err)
			return
		}
		c.logger.Info("forgot an allocation the client could not restore and does not run", "alloc_id", id)
		delete(c.unrestored, id)
	}
	c.unrestored = nil
	c.collectLeftovers()
}

// gcNetworks garbage-collects the networks of allocations that are not
// live (see allocLive), for at most c.networkGCTimeout. It runs beside the
// node's registration and heartbeats, which a plugin hanging on DEL must
// not hold up (the servers would take the node for down), and beside the
// allocations' runners, restored ones and those the servers place or stop
// meanwhile: the Networker takes each dead allocation's lock, asks again
// whether it is live, and never touches the live ones.
func (c *Client) gcNetworks() {
	defer c.wg.Done()
	if c.cfg.Networker == nil {
		return
	}
	ctx, cancel := context.WithTimeout(c.ctx, c.networkGCTimeout)
	defer cancel()
	if err := c.cfg.Networker.GC(ctx, c.allocLive); err != nil {
		c.logger.Warn("failed to garbage-collect allocation networks (left for the next start)", "error", err)
	}
}

// allocLive reports whether allocation id may still use its network: the
// client runs it, or is stopping it to destroy it, and it may have tasks
// running (see mayRun). A runner is known before its network is set up.
func (c *Client) allocLive(id string) bool {
	c.mu.Lock()
	ar := c.runners[id]
	if ar == nil {
		ar = c.destroying[id]
	}
	c.mu.Unlock()
	return ar != nil && mayRun(ar.ClientView())
}

// sweepDrivers lets drivers whose tasks outlive the agent (docker's
// containers) remove those of allocations this client no longer has: gone
// while the agent was down, or left by a client state that was reset.
// Allocations with a runner, even terminal ones, are kept: their runner
// still destroys their tasks.
func (c *Client) sweepDrivers() {
	known := func(allocID string) bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		_, ok := c.runners[allocID]
		return ok
	}
	for name, d := range c.drivers {
		s, ok := d.(driver.Sweeper)
		if !ok {
			continue
		}
		n, err := s.Sweep(c.ctx, known)
		if err != nil {
			c.logger.Warn("failed to sweep tasks of gone allocations", "driver", name, "error", err)
		} else if n > 0 {
			c.logger.Info("removed tasks of gone allocations", "driver", name, "count", n)
		}
	}
}

// Shutdown detaches from every allocation (tasks keep running for the next
// agent), sends the last status updates and closes the client state.
func (c *Client) Shutdown() error {
	c.cancel()
	c.mu.Lock()
	runners := make([]*allocrunner.AllocRunner, 0, len(c.runners))
	for _, ar := range c.runners {
		runners = append(runners, ar)
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	for _, ar := range runners {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ar.Shutdown()
		}()
	}
	wg.Wait()
	c.wg.Wait()
	c.flush(context.Background())
	return c.db.Close()
}

// restore starts a runner for every allocation in the client state and
// returns those it could not restore.
func (c *Client) restore() (map[string]bool, error) {
	allocs, orphans, err := c.db.AllocsAndOrphans()
	if err != nil {
		return nil, fmt.Errorf("failed to read client state: %w", err)
	}
	unrestored := map[string]bool{}
	for _, id := range orphans {
		c.logger.Error("allocation has task state but no allocation record; its tasks are re-attached once the server sends it", "alloc_id", id)
		unrestored[id] = true
	}
	for _, a := range allocs {
		tasks, err := c.db.TaskStates(a.ID)
		if err != nil {
			return nil, fmt.Errorf("failed to read task states of %s: %w", a.ID, err)
		}
		ar, err := c.newRunner(a, true, tasks)
		if err != nil {
			c.logger.Error("failed to restore allocation; its tasks are re-attached once the server sends it", "alloc_id", a.ID, "error", err)
			unrestored[a.ID] = true
			continue
		}
		c.mu.Lock()
		c.runners[a.ID] = ar
		c.seen[a.ID] = a.AllocModifyIndex
		c.mu.Unlock()
		c.logger.Info("restoring allocation", "alloc_id", a.ID, "live", mayRun(ar.ClientView()))
		go ar.Run()
	}
	return unrestored, nil
}

// mayRun reports whether an allocation may still have running (or not yet
// started) tasks, so its network must not be collected: its status is not
// terminal, or one of its tasks is not dead (an allocation is failed as
// soon as one task failed for good, while its siblings are still being
// stopped through shutdown_delay and their kill timeouts).
func mayRun(a *structs.Allocation) bool {
	if !a.TerminalStatus() {
		return true
	}
	for _, ts := range a.TaskStates {
		if ts != nil && ts.State != structs.TaskStateDead {
			return true
		}
	}
	return false
}

func (c *Client) newRunner(a *structs.Allocation, restored bool, tasks map[string]*clientstate.LocalTaskState) (*allocrunner.AllocRunner, error) {
	hooks := []allocrunner.AllocHook{allocrunner.NewNetworkHook(c.networker(), c.cfg.NetworkUnavailable, c.db)}
	if c.cfg.Hooks != nil {
		hooks = append(hooks, c.cfg.Hooks(a)...)
	}
	return allocrunner.New(allocrunner.Config{
		Alloc: a, Node: c.Node(), AllocDir: c.allocDir(a.ID), Driver: c.driver, State: c.db, Hooks: hooks,
		Restored: restored, RestoredTasks: tasks, OnUpdate: c.queueUpdate, PrevAlloc: c.waitPrev,
		Logger: c.cfg.Logger.Named("alloc_runner"), TemplateCatalog: c.cfg.TemplateCatalog, MaxKillTimeout: c.cfg.MaxKillTimeout,
	})
}

// networker returns the configured Networker as the hook's interface,
// keeping a nil interface nil.
func (c *Client) networker() allocrunner.Networker {
	if c.cfg.Networker == nil {
		return nil
	}
	return c.cfg.Networker
}

func (c *Client) driver(name string) (driver.Driver, error) {
	if d, ok := c.drivers[name]; ok {
		return d, nil
	}
	return nil, fmt.Errorf("driver %s not available on node %s", name, c.node.Name)
}

func (c *Client) allocDir(id string) *allocdir.AllocDir {
	return allocdir.New(filepath.Join(c.cfg.DataDir, "alloc"), id)
}

// waitPrev blocks until the previous allocation's runner finished: one the
// client runs, or one the servers forgot that is being destroyed (its
// tasks may still be stopping).
func (c *Client) waitPrev(ctx context.Context, id string) {
	c.mu.Lock()
	ar := c.runners[id]
	if ar == nil {
		ar = c.destroying[id]
	}
	c.mu.Unlock()
	if ar == nil {
		return
	}
	select {
	case <-ar.WaitCh():
	case <-ctx.Done():
	}
}
