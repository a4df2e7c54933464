// Package sitoken mints and revokes the service identity tokens of connect
// sidecars: the workload identity each injected proxy presents to the xDS
// server (x-consul-token), as Nomad derives a Consul SI token for every
// connect task. A token is an ACL token with one service identity (service
// write on its service and its sidecar proxy, service read on the rest),
// bound to the allocation and task it was minted for; the servers revoke
// it once that allocation has ended or is gone.
//
// The servers mint a token only for a connect proxy task of an allocation
// placed on the calling node that is not stopping, so a node can obtain
// identities only for what the scheduler placed on it.
//
// Concurrency: a Minter is safe for concurrent use.
package sitoken

import (
	"context"
	"errors"
	"fmt"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/acl"
	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/structs"
)

// FileName is the token's file in the sidecar task's secrets directory
// (Nomad's si_token).
const FileName = "si_token"

// Sentinels of Derive; the RPC layer answers 403 for ErrRefused and 404
// for ErrUnknownAlloc.
var (
	// ErrRefused: the caller may not have a token for that task.
	ErrRefused = errors.New("service identity token refused")
	// ErrUnknownAlloc: the allocation does not exist.
	ErrUnknownAlloc = errors.New("unknown allocation")
)

// Allocs reads allocations from the servers' state: Alloc returns nil, nil
// for an ID that names none. *server.Server implements it (it also
// accepts prefixes; Minter checks the ID it gets back).
type Allocs interface {
	Alloc(ctx context.Context, id string) (*structs.Allocation, error)
}

// Store is the part of the ACL state a Minter writes.
type Store interface {
	UpsertToken(ctx context.Context, t *acl.Token) (*acl.Token, error)
	DeleteToken(ctx context.Context, accessorID string) error
	ListTokens(ctx context.Context) ([]*acl.Token, uint64, error)
}

// Minter mints and revokes service identity tokens on a server.
type Minter struct {
	allocs Allocs
	store  Store
	logger hclog.Logger
}

// NewMinter returns a Minter over the servers' allocations and ACL state;
// logger is used as given (name it, e.g. "acl.sitoken").
func NewMinter(allocs Allocs, store Store, logger hclog.Logger) *Minter {
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	return &Minter{allocs: allocs, store: store, logger: logger}
}

// TokenName is the name of the token of a task, as Nomad names the SI
// tokens it derives: "_nomad_si [<namespace>] [<alloc>] [<task>]".
func TokenName(namespace, allocID, task string) string {
	if namespace == "" {
		namespace = "default"
	}
	return fmt.Sprintf("_nomad_si [%s] [%s] [%s]", namespace, allocID, task)
}

// Derive mints the token of task, the connect proxy task of allocation
// allocID, for the node nodeID that asks; the token returned carries its
// SecretID. It fails with ErrUnknownAlloc when the allocation does not
// exist, and with ErrRefused when it is placed on another node, is
// stopping, or task is not one of its connect proxy tasks.
func (m *Minter) Derive(ctx context.Context, nodeID, allocID, task string) (*acl.Token, error) {
	alloc, err := m.allocs.Alloc(ctx, allocID)
	if err != nil {
		return nil, fmt.Errorf("failed to read allocation %s: %w", allocID, err)
	}
	if alloc == nil || alloc.ID != allocID {
		return nil, fmt.Errorf("%w %s", ErrUnknownAlloc, allocID)
	}
	service, err := proxyService(alloc, nodeID, task)
	if err != nil {
		m.logger.Warn("refused a service identity token", "node_id", nodeID, "alloc_id", allocID, "task", task, "error", err)
		return nil, err
	}
	tok, err := m.store.UpsertToken(ctx, &acl.Token{
		Name:              TokenName(alloc.Namespace, allocID, task),
		Type:              acl.TypeClient,
		ServiceIdentities: []*acl.ServiceIdentity{{ServiceName: service}},
		AllocID:           allocID,
		TaskName:          task,
	})
	if err != nil {
		return nil, fmt.Errorf("failed to store the service identity token of task %q: %w", task, err)
	}
	m.logger.Info("minted a service identity token", "node_id", nodeID, "alloc_id", allocID, "task", task,
		"service", service, "accessor_id", tok.AccessorID)
	return tok, nil
}

// proxyService is the destination service of task, which must be the
// connect proxy task of one of the group's mesh services (a task whose
// kind merely names a service is not: kind is the submitter's input), of
// alloc, placed on nodeID and not stopping.
func proxyService(alloc *structs.Allocation, nodeID, task string) (string, error) {
	switch {
	case alloc.NodeID != nodeID:
		return "", fmt.Errorf("%w: allocation %s is not placed on node %s", ErrRefused, alloc.ID, nodeID)
	case alloc.TerminalStatus() || alloc.DesiredStatus == structs.AllocDesiredStatusStop:
		return "", fmt.Errorf("%w: allocation %s is stopped or stopping", ErrRefused, alloc.ID)
	case alloc.Job == nil:
		return "", fmt.Errorf("%w: allocation %s carries no job", ErrRefused, alloc.ID)
	}
	tg := alloc.Job.LookupTaskGroup(alloc.TaskGroup)
	if tg != nil {
		for _, s := range connect.MeshServices(tg) {
			t := connect.ProxyTaskFor(tg, s)
			if t == nil || t.Name != task {
				continue
			}
			if svc, ok := connect.ProxyKindService(t.Kind); ok {
				return svc, nil
			}
		}
	}
	return "", fmt.Errorf("%w: task %q is not a connect proxy task of allocation %s", ErrRefused, task, alloc.ID)
}

// Sweep revokes the workload tokens whose allocation has ended (client
// status complete, failed or lost) or no longer exists, and returns how
// many it revoked. An allocation that cannot be read keeps its tokens:
// a read error never takes a running sidecar's identity.
func (m *Minter) Sweep(ctx context.Context) (int, error) {
	toks, _, err := m.store.ListTokens(ctx)
	if err != nil {
		return 0, fmt.Errorf("failed to list ACL tokens: %w", err)
	}
	ended := map[string]bool{}
	revoked := 0
	var errs []error
	for _, t := range toks {
		if t.AllocID == "" {
			continue
		}
		gone, known := ended[t.AllocID]
		if !known {
			alloc, err := m.allocs.Alloc(ctx, t.AllocID)
			if err != nil {
				errs = append(errs, fmt.Errorf("failed to read allocation %s: %w", t.AllocID, err))
				continue
			}
			gone = alloc == nil || alloc.ID != t.AllocID || alloc.TerminalStatus()
			ended[t.AllocID] = gone
		}
		if !gone {
			continue
		}
		if err := m.store.DeleteToken(ctx, t.AccessorID); err != nil && !errors.Is(err, acl.ErrNotFound) {
			errs = append(errs, fmt.Errorf("failed to revoke token %s: %w", t.AccessorID, err))
			continue
		}
		revoked++
		m.logger.Info("revoked the service identity token of an ended allocation", "alloc_id", t.AllocID,
			"task", t.TaskName, "accessor_id", t.AccessorID)
	}
	return revoked, errors.Join(errs...)
}
