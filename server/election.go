package server

import (
	"context"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/client/v3/concurrency"
)

// DefaultLeaderTTL is how long a leader that stopped renewing its session
// (crashed, cut off) stays leader: etcd's lease TTL, in seconds.
const DefaultLeaderTTL = 3

// EtcdLeadership elects the leader with etcd's concurrency.Election under
// Prefix+"leader": the candidate whose key was created first leads while
// its session's lease is kept alive.
type EtcdLeadership struct {
	Client *clientv3.Client
	Prefix string
	// Name identifies this server in logs (its node name); Addr is its
	// advertised RPC address, the election value followers forward to.
	Name string
	Addr string
	// ID is this server's persistent identity (kept in its data dir): a
	// candidate key with the same ID left by this server's previous
	// process (killed before its lease ran out) is removed at start, so a
	// restarted lone server leads at once instead of after the lease TTL.
	ID string
	// TTL is the session lease in seconds; 0 = DefaultLeaderTTL.
	TTL int
	// Expect is bootstrap_expect: a new cluster elects no leader before it
	// has this many voting etcd members (see waitBootstrap); 0 or 1 = no
	// wait. Only meaningful with embedded members.
	Expect int
	// Used, when set, reports whether the cluster already holds state
	// written under a leader (an upgrade from before bootstrap_expect was
	// enforced, or a cluster that lost servers): it is not held back then.
	Used   func() bool
	Logger hclog.Logger
}

var _ Leadership = (*EtcdLeadership)(nil)

// Run implements Leadership.
func (e *EtcdLeadership) Run(ctx context.Context, won func(ctx context.Context, key string, rev int64), lost func()) {
	logger := e.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	ttl := e.TTL
	if ttl <= 0 {
		ttl = DefaultLeaderTTL
	}
	if !e.waitBootstrap(ctx, logger) {
		return
	}
	for backoff := time.Duration(0); ctx.Err() == nil; {
		if backoff > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(backoff):
			}
		}
		if err := e.term(ctx, ttl, won, lost); err != nil && ctx.Err() == nil {
			logger.Warn("leader election failed; retrying", "error", err)
			backoff = min(max(2*backoff, 200*time.Millisecond), 5*time.Second)
			continue
		}
		backoff = 0
	}
}

// term campaigns once and, if elected, leads until the session ends or
// ctx does.
func (e *EtcdLeadership) term(ctx context.Context, ttl int, won func(context.Context, string, int64), lost func()) error {
	sess, err := concurrency.NewSession(e.Client, concurrency.WithTTL(ttl), concurrency.WithContext(ctx))
	if err != nil {
		return err
	}
	defer sess.Close() // revokes the lease: the next candidate wins at once
	el := concurrency.NewElection(sess, e.Prefix+"leader")
	e.dropStale(ctx, sess.Lease())
	if err := el.Campaign(ctx, e.value()); err != nil {
		return err
	}
	leadCtx, cancel := context.WithCancel(ctx)
	won(leadCtx, el.Key(), el.Rev())
	select {
	case <-sess.Done():
	case <-ctx.Done():
	}
	cancel()
	lost()
	rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer rcancel()
	_ = el.Resign(rctx)
	return nil
}

// value is the election value: "<ID> <Addr> <Name>".
func (e *EtcdLeadership) value() string { return e.ID + " " + e.Addr + " " + e.Name }

// Candidate is a live server: its election key exists while its session
// does.
type Candidate struct {
	ID, Addr, Name string
	Leader         bool
}

// Candidates lists the live servers, the leader first.
func (e *EtcdLeadership) Candidates(ctx context.Context) ([]Candidate, error) {
	resp, err := e.Client.Get(ctx, e.Prefix+"leader/", clientv3.WithPrefix(),
		clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil {
		return nil, err
	}
	out := make([]Candidate, 0, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		f := strings.Fields(string(kv.Value))
		for len(f) < 3 {
			f = append(f, "")
		}
		out = append(out, Candidate{ID: f[0], Addr: f[1], Name: f[2], Leader: i == 0})
	}
	return out, nil
}

// dropStale revokes the leases of candidate keys this server left before
// (same ID, another lease).
func (e *EtcdLeadership) dropStale(ctx context.Context, own clientv3.LeaseID) {
	if e.ID == "" {
		return
	}
	resp, err := e.Client.Get(ctx, e.Prefix+"leader/", clientv3.WithPrefix())
	if err != nil {
		return
	}
	for _, kv := range resp.Kvs {
		id, _, _ := strings.Cut(string(kv.Value), " ")
		if id == e.ID && clientv3.LeaseID(kv.Lease) != own {
			if _, err := e.Client.Revoke(ctx, clientv3.LeaseID(kv.Lease)); err == nil && e.Logger != nil {
				e.Logger.Info("removed this server's candidacy from before its restart", "key", string(kv.Key))
			}
		}
	}
}

// Leader implements Leadership: the RPC address in the oldest candidate's
// key, which is the leader's.
func (e *EtcdLeadership) Leader(ctx context.Context) (string, error) {
	resp, err := e.Client.Get(ctx, e.Prefix+"leader/", clientv3.WithFirstCreate()...)
	if err != nil {
		return "", err
	}
	if len(resp.Kvs) == 0 {
		return "", nil
	}
	if f := strings.Fields(string(resp.Kvs[0].Value)); len(f) > 1 {
		return f[1], nil
	}
	return "", nil
}
