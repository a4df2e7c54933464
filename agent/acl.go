package agent

import (
	"context"
	"errors"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshlet/meshlet/acl"
	"github.com/meshlet/meshlet/aclstate"
	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/sitoken"
)

// aclSystem is the agent's ACL system when acl { enabled = true }: the
// servers keep tokens and policies in etcd (store, nil on client-only
// agents) and every agent resolves request tokens (resolver: from the
// store on servers, through the servers on client-only agents, cached
// for acl.token_ttl).
type aclSystem struct {
	store    *aclstate.EtcdStore
	resolver *acl.Resolver
	// minter mints sidecars' service identity tokens (servers).
	minter *sitoken.Minter
	cancel context.CancelFunc
	done   chan struct{}
}

// validateRules is the store's check of a policy's rules on write.
func validateRules(rules string) error {
	_, err := acl.Parse(rules)
	return err
}

// openACLStore opens the servers' ACL state under prefix and keeps the
// resolver's caches in step with it: every ACL write (on any server)
// moves the index and invalidates them (on the server that wrote, before
// the write returns; on the others through the store's watch), so a
// deleted token stops working at once.
func (a *Agent) openACLStore(cli *clientv3.Client, prefix string) {
	var res *acl.Resolver
	store := aclstate.Open(cli, aclstate.Options{Prefix: prefix, Logger: a.logger, ValidateRules: validateRules,
		OnCommit: func() { res.Invalidate() }})
	res = acl.NewResolver(store, acl.ResolverOptions{TTL: a.cfg.ACL.TokenTTL, Logger: a.logger.Named("acl")})
	ctx, cancel := context.WithCancel(context.Background())
	sys := &aclSystem{store: store, resolver: res, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(sys.done)
		for range store.Watch(ctx) {
			res.Invalidate()
		}
	}()
	a.acl = sys
}

// aclResolver returns the resolver of request tokens, nil when ACLs are
// disabled. A client-only agent's is made on first use, over its RPC
// client (the servers' state).
func (a *Agent) aclResolver() (*acl.Resolver, error) {
	if !a.cfg.ACL.Enabled {
		return nil, nil
	}
	if a.acl != nil {
		return a.acl.resolver, nil
	}
	if a.rpcClient == nil {
		return nil, errors.New("ACLs are enabled but this agent has neither a server state nor a server connection")
	}
	a.acl = &aclSystem{resolver: acl.NewResolver(a.rpcClient.ACL(), acl.ResolverOptions{TTL: a.cfg.ACL.TokenTTL,
		Logger: a.logger.Named("acl")})}
	return a.acl.resolver, nil
}

// aclStore is the servers' ACL state, nil on client-only agents and with
// ACLs disabled.
func (a *Agent) aclStore() acl.Store {
	if a.acl == nil || a.acl.store == nil {
		return nil
	}
	return a.acl.store
}

// stopACL ends the store's watch.
func (a *Agent) stopACL() {
	if a.acl != nil && a.acl.cancel != nil {
		a.acl.cancel()
		<-a.acl.done
	}
	a.acl = nil
}

// apiACLOption is the Nomad API's token enforcement: on servers with the
// ACL state (the /v1/acl/* routes write it), on client-only agents for the
// routes they answer themselves (logs, exec, checks; the rest is forwarded
// to the servers with the request's token).
func (a *Agent) apiACLOption() api.ServerOption {
	if a.acl == nil {
		return func(*api.Server) {}
	}
	return api.WithACL(a.acl.resolver, a.aclStore())
}
