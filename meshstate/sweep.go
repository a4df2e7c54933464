package meshstate

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshlet/meshlet/catalog"
)

// NodeIDs returns the IDs of the nodes that have registrations
// (catalog/<node-id>/...), sorted.
func (s *Store) NodeIDs(ctx context.Context) ([]string, error) {
	ctx, cancel := s.callCtx(ctx)
	defer cancel()
	dir := s.prefix + catalogDir
	resp, err := s.c.Get(ctx, dir, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, fmt.Errorf("failed to list the nodes with registrations: %w", err)
	}
	seen := map[string]bool{}
	var out []string
	for _, kv := range resp.Kvs {
		node, _, ok := strings.Cut(strings.TrimPrefix(string(kv.Key), dir), "/")
		if ok && node != "" && !seen[node] {
			seen[node] = true
			out = append(out, node)
		}
	}
	sort.Strings(out)
	return out, nil
}

// SweepNodes removes the registrations of every node that is not up: the
// leader's repair of what a node-down removal missed (it failed, or the
// node was removed from the cluster). up is called after the listing and
// returns the nodes whose registrations stay (a node registers before it
// writes registrations, so one listed is known to up). It returns how
// many allocations each removed node had; on a failed removal it goes on
// with the other nodes and returns the errors joined. The nodes of
// services registered through /v1/catalog/register
// (catalog.ExternalNodePrefix) run no agent: they are never swept.
func (s *Store) SweepNodes(ctx context.Context, up func(ctx context.Context) (map[string]bool, error)) (map[string]int, error) {
	ids, err := s.NodeIDs(ctx)
	if err != nil || len(ids) == 0 {
		return nil, err
	}
	keep, err := up(ctx)
	if err != nil {
		return nil, fmt.Errorf("failed to list the cluster's nodes: %w", err)
	}
	removed := map[string]int{}
	var errs []error
	for _, id := range ids {
		if keep[id] || strings.HasPrefix(id, catalog.ExternalNodePrefix) {
			continue
		}
		n, err := s.DeleteNode(ctx, id)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		removed[id] = n
	}
	return removed, errors.Join(errs...)
}
