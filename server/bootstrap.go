package server

import (
	"context"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// bootstrapPoll is how often a server waiting for bootstrap_expect looks
// at the membership.
const bootstrapPoll = 500 * time.Millisecond

// waitBootstrap holds the first election of a new cluster until it has
// Expect voting etcd members (Nomad's bootstrap_expect: no leader before
// the expected servers are there). Once reached, Prefix+"bootstrapped" is
// written and no server waits again (a cluster that later loses servers
// keeps electing from what is left, as etcd's quorum allows). It returns
// false when ctx ends first.
func (e *EtcdLeadership) waitBootstrap(ctx context.Context, logger hclog.Logger) bool {
	if e.Expect <= 1 {
		return true
	}
	key := e.Prefix + "bootstrapped"
	last := time.Time{}
	for {
		if done, voters := e.bootstrapState(ctx, key); done || (e.Used != nil && e.Used()) {
			if !done {
				_, _ = e.Client.Put(ctx, key, time.Now().UTC().Format(time.RFC3339))
				logger.Info("cluster holds state already: bootstrap_expect not awaited", "bootstrap_expect", e.Expect)
			}
			return true
		} else if voters >= e.Expect {
			if _, err := e.Client.Put(ctx, key, time.Now().UTC().Format(time.RFC3339)); err == nil {
				logger.Info("cluster bootstrapped: expected servers present", "servers", voters, "bootstrap_expect", e.Expect)
				return true
			}
		} else if time.Since(last) > 10*time.Second {
			logger.Info("waiting for servers before electing a leader", "servers", voters, "bootstrap_expect", e.Expect)
			last = time.Now()
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(bootstrapPoll):
		}
	}
}

// bootstrapState reports whether the cluster was bootstrapped and how many
// voting members it has (0 on errors: the caller polls again).
func (e *EtcdLeadership) bootstrapState(ctx context.Context, key string) (done bool, voters int) {
	cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	resp, err := e.Client.Get(cctx, key, clientv3.WithCountOnly())
	if err == nil && resp.Count > 0 {
		return true, 0
	}
	list, err := e.Client.MemberList(cctx)
	if err != nil {
		return false, 0
	}
	for _, m := range list.Members {
		if !m.IsLearner {
			voters++
		}
	}
	return false, voters
}
