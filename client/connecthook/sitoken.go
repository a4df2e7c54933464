package connecthook

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/meshlet/meshlet/acl"
	"github.com/meshlet/meshlet/client/allocrunner"
	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/sitoken"
	"github.com/meshlet/meshlet/structs"
)

// SITokenSource derives the service identity token of a connect proxy
// task from the servers (*rpc.Client, or the server agent's own minter).
// It fails with acl.ErrDisabled when the servers run without ACLs.
type SITokenSource interface {
	DeriveSIToken(ctx context.Context, allocID, task string) (string, error)
}

// siTokens gives every sidecar of tg its service identity token, in the
// task's secrets/si_token (owned by the task's user, 0600), and returns
// them by service. A token already there (an allocation restored after an
// agent restart) is kept: its sidecar may be running with it. Without a
// source, or when the servers run without ACLs, there are none.
func (h *SidecarHook) siTokens(ctx context.Context, hc *allocrunner.AllocHookContext, tg *structs.TaskGroup) (map[string]string, error) {
	if h.d.SITokens == nil {
		return nil, nil
	}
	out := map[string]string{}
	for _, s := range connect.MeshServices(tg) {
		task := connect.ProxyTaskFor(tg, s)
		if task == nil {
			return nil, fmt.Errorf("service %q: no sidecar task in group %q", s.Name, tg.Name)
		}
		b, err := hc.AllocDir.ReadSecret(task.Name, sitoken.FileName)
		if err == nil && strings.TrimSpace(string(b)) != "" {
			out[s.Name] = strings.TrimSpace(string(b))
			continue
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("task %q: %w", task.Name, err)
		}
		secret, err := h.d.SITokens.DeriveSIToken(ctx, hc.Alloc.ID, task.Name)
		if errors.Is(err, acl.ErrDisabled) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("task %q: %w", task.Name, err)
		}
		if err := hc.AllocDir.WriteSecret(task.Name, sitoken.FileName, task.User, []byte(secret)); err != nil {
			return nil, fmt.Errorf("task %q: %w", task.Name, err)
		}
		hc.Logger.Info("sidecar service identity token derived", "task", task.Name, "service", s.Name)
		out[s.Name] = secret
	}
	return out, nil
}
