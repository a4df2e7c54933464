package rpc

import (
	"context"

	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/structs"
)

// ConfigEntriesReader is a ConnectBackend that reads the stored config
// entries (the servers' meshstate.Store does): a terminating gateway's
// links may come from its terminating-gateway entry, written with
// `meshlet config write`, as well as from its job.
type ConfigEntriesReader interface {
	ConfigEntries(ctx context.Context) (*configentry.Set, uint64, error)
}

// terminatingGateways names the terminating gateway services of groups.
func terminatingGateways(groups []*structs.TaskGroup) []string {
	var out []string
	for _, tg := range groups {
		for _, svc := range tg.Services {
			if svc != nil && svc.Connect.IsTerminating() {
				out = append(out, svc.Name)
			}
		}
	}
	return out
}

// entryLinks reports whether the terminating-gateway config entry of one
// of gateways links service (false when the backend keeps no entries).
func (s *Server) entryLinks(ctx context.Context, gateways []string, service string) (bool, error) {
	r, ok := s.cfg.Connect.(ConfigEntriesReader)
	if !ok || len(gateways) == 0 {
		return false, nil
	}
	set, _, err := r.ConfigEntries(ctx)
	if err != nil {
		return false, err
	}
	for _, gw := range gateways {
		if _, linked := set.LinkedService(gw, service); linked {
			return true, nil
		}
	}
	return false, nil
}
