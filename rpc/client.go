package rpc

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/structs"
)

// ClientConfig configures a Client.
type ClientConfig struct {
	// Servers are the servers' RPC addresses (host:port), tried in order
	// from the last one that answered.
	Servers []string
	// TLS presents the node's certificate and verifies the servers'; nil
	// is plaintext (insecure, logged as a warning).
	TLS *tls.Config
	// NodeID and NodeSecret identify the node on every call. Either may be
	// empty: the Client then takes them from the node of RegisterNode
	// (its ID and SecretID).
	NodeID     string
	NodeSecret string // never logged
	Logger     hclog.Logger
	// Timeout bounds one attempt of a non-blocking call on one server, and
	// how long a write is retried while the servers have no leader
	// (default 10 s).
	Timeout time.Duration
	// BlockingWait is how long one NodeAllocs long-poll waits on a server
	// (default 1 minute; the server caps it).
	BlockingWait time.Duration
}

// Client calls the servers on behalf of one node; it implements
// client.ServerConn.
type Client struct {
	cfg       ClientConfig
	logger    hclog.Logger
	scheme    string
	transport *http.Transport
	http      *http.Client
	// preferred is the index in cfg.Servers of the server that answered last.
	preferred atomic.Int64

	mu             sync.Mutex
	nodeID, secret string

	// ctx ends at Close, ending calls in flight.
	ctx    context.Context
	cancel context.CancelFunc
}

// Transport timeouts: a dead server is left within seconds.
const (
	dialTimeout      = 3 * time.Second
	handshakeTimeout = 5 * time.Second
	pingAfter        = 10 * time.Second // HTTP/2 ping after this long without frames
	pingTimeout      = 5 * time.Second
)

// NewClient checks cfg and builds a Client; it connects on the first call.
func NewClient(cfg ClientConfig) (*Client, error) {
	if len(cfg.Servers) == 0 {
		return nil, errors.New("failed to create RPC client: no server addresses")
	}
	for _, s := range cfg.Servers {
		if _, _, err := net.SplitHostPort(s); err != nil {
			return nil, fmt.Errorf("failed to create RPC client: server address %q: %w", s, err)
		}
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.BlockingWait <= 0 {
		cfg.BlockingWait = DefaultBlockingWait
	}
	cfg.Servers = append([]string(nil), cfg.Servers...)
	tlsCfg, err := dialTLS(cfg.TLS)
	if err != nil {
		return nil, err
	}
	logger := cfg.Logger.Named("rpc_client")
	scheme := "https"
	if tlsCfg == nil {
		scheme = "http"
		logger.Warn("RPC to the servers is plaintext and unauthenticated; configure TLS", "servers", cfg.Servers)
	}
	tr := newTransport(tlsCfg)
	ctx, cancel := context.WithCancel(context.Background())
	c := &Client{cfg: cfg, logger: logger, scheme: scheme, transport: tr, http: &http.Client{Transport: tr},
		nodeID: cfg.NodeID, secret: cfg.NodeSecret, ctx: ctx, cancel: cancel}
	return c, nil
}

// newTransport is the HTTP transport to servers: HTTP/2 over TLS with
// pings that find a silently dead connection, no proxy from the
// environment.
func newTransport(tlsCfg *tls.Config) *http.Transport {
	return &http.Transport{
		DialContext:         (&net.Dialer{Timeout: dialTimeout, KeepAlive: 15 * time.Second}).DialContext,
		TLSClientConfig:     tlsCfg,
		TLSHandshakeTimeout: handshakeTimeout,
		ForceAttemptHTTP2:   true,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     90 * time.Second,
		HTTP2:               &http.HTTP2Config{SendPingTimeout: pingAfter, PingTimeout: pingTimeout},
	}
}

// Close ends the calls in flight (ErrClosed) and closes idle connections.
func (c *Client) Close() error {
	c.cancel()
	c.transport.CloseIdleConnections()
	return nil
}

// identity is the node the calls are made for.
func (c *Client) identity() (id, secret string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.nodeID == "" || c.secret == "" {
		return "", "", errors.New("failed to call the servers: node ID and secret unknown (RegisterNode first)")
	}
	return c.nodeID, c.secret, nil
}

// RegisterNode registers the node; its SecretID (or the configured
// NodeSecret) becomes the node's secret on its first registration.
func (c *Client) RegisterNode(ctx context.Context, node *structs.Node) error {
	if node == nil || node.ID == "" {
		return fmt.Errorf("failed to register node: %w: no node ID", ErrBadRequest)
	}
	c.mu.Lock()
	id, secret := c.nodeID, c.secret
	c.mu.Unlock()
	if id != "" && id != node.ID {
		return fmt.Errorf("failed to register node %s: this client is for node %s", node.ID, id)
	}
	if s := nodeSecret(node); s != "" {
		if secret != "" && !secretEqual(secret, s) {
			return fmt.Errorf("failed to register node %s: the node's secret differs from the configured one", node.ID)
		}
		secret = s
	}
	if secret == "" {
		return fmt.Errorf("failed to register node %s: no node secret", node.ID)
	}
	cp := *node
	setNodeSecret(&cp, secret)
	body, err := json.Marshal(&cp)
	if err != nil {
		return fmt.Errorf("failed to encode node %s: %w", node.ID, err)
	}
	req := &request{what: "register node", method: http.MethodPost, path: pathRegister, body: body,
		nodeID: node.ID, secret: secret, timeout: c.cfg.Timeout, write: true}
	if err := c.call(ctx, req, nil); err != nil {
		return err
	}
	c.mu.Lock()
	c.nodeID, c.secret = node.ID, secret
	c.mu.Unlock()
	return nil
}

// NodeAllocs blocks until the servers' index passes minIndex (long-polls,
// polling again when a wait ends without change) and returns the node's
// allocations with the index they reflect.
func (c *Client) NodeAllocs(ctx context.Context, nodeID string, minIndex uint64) ([]*structs.Allocation, uint64, error) {
	id, secret, err := c.identity()
	if err != nil {
		return nil, 0, err
	}
	wait := c.cfg.BlockingWait
	q := url.Values{"node_id": {nodeID}, "index": {strconv.FormatUint(minIndex, 10)}, "wait": {wait.String()}}
	req := &request{what: "read allocations", method: http.MethodGet, path: pathAllocs, query: q,
		nodeID: id, secret: secret, timeout: wait + wait/16 + c.cfg.Timeout}
	for {
		var out allocsResponse
		if err := c.call(ctx, req, &out); err != nil {
			return nil, 0, err
		}
		if minIndex == 0 || out.Index > minIndex {
			return out.Allocs, out.Index, nil
		}
	}
}

// UpdateAllocs sends the node's allocation updates.
func (c *Client) UpdateAllocs(ctx context.Context, updates []*structs.Allocation) error {
	if len(updates) == 0 {
		return nil
	}
	id, secret, err := c.identity()
	if err != nil {
		return err
	}
	body, err := json.Marshal(updates)
	if err != nil {
		return fmt.Errorf("failed to encode allocation updates: %w", err)
	}
	req := &request{what: "update allocations", method: http.MethodPost, path: pathUpdate, body: body,
		nodeID: id, secret: secret, timeout: c.cfg.Timeout, write: true}
	return c.call(ctx, req, nil)
}

// Heartbeat tells the leader the node is alive and returns the interval
// of the next heartbeat. An error wrapping structs.ErrUnknownNode asks
// for a new registration.
func (c *Client) Heartbeat(ctx context.Context, nodeID string) (time.Duration, error) {
	id, secret, err := c.identity()
	if err != nil {
		return 0, err
	}
	body, err := json.Marshal(heartbeatRequest{NodeID: nodeID})
	if err != nil {
		return 0, fmt.Errorf("failed to encode heartbeat: %w", err)
	}
	req := &request{what: "heartbeat", method: http.MethodPost, path: pathHeartbeat, body: body,
		nodeID: id, secret: secret, timeout: c.cfg.Timeout, write: true}
	var out heartbeatResponse
	if err := c.call(ctx, req, &out); err != nil {
		return 0, err
	}
	return out.HeartbeatTTL, nil
}
