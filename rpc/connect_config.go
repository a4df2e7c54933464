package rpc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/acl"
	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/meshstate"
)

// Config entry writes for client agents: POST /v1/rpc/connect/config has
// the servers put or delete one L7 config entry (meshstate's
// ConfigEntryWriter on the servers' store, which validates it against the
// stored entries); the agent's registry then follows through the mesh
// feed. The caller must be an authenticated node, as for the other mesh
// calls; none needs the leader (the write is a compare-and-swap from any
// server). The entries' refusals keep their configentry sentinel (codes
// below), so that a client agent's API answers as a server's.
//
// Like the other mesh calls a write moves to the next server on a
// connection error, a timeout or a 5xx: a plain put or delete is
// idempotent; a check-and-set one whose first attempt committed answers
// false the second time (the index moved), as Consul's may.

const pathConnectConfig = "/v1/rpc/connect/config"

// Error codes of the config call.
const (
	codeConfigInvalid     = "config_invalid"
	codeConfigConflict    = "config_conflict"
	codeConfigUnknownKind = "config_unknown_kind"
)

// Operations of the config call.
const (
	configOpPut    = "put"
	configOpDelete = "delete"
)

// connectConfigRequest is the body of the config call: Op "put" takes
// Entry (consul/api's JSON of the entry), "delete" Kind and Name; CAS is
// the optional check-and-set index.
type connectConfigRequest struct {
	Op    string          `json:"Op"`
	Entry json.RawMessage `json:"Entry,omitempty"`
	Kind  string          `json:"Kind,omitempty"`
	Name  string          `json:"Name,omitempty"`
	CAS   *uint64         `json:"CAS,omitempty"`
}

// connectConfigResponse is whether the write was made and the config
// index after it.
type connectConfigResponse struct {
	OK    bool   `json:"OK"`
	Index uint64 `json:"Index"`
}

// configSentinel is the configentry sentinel of an error code, nil for
// other codes.
func configSentinel(code string) error {
	switch code {
	case codeConfigInvalid:
		return configentry.ErrInvalid
	case codeConfigConflict:
		return configentry.ErrConflict
	case codeConfigUnknownKind:
		return configentry.ErrUnknownKind
	}
	return nil
}

// handleConnectConfig writes one config entry for an authenticated node.
func (s *Server) handleConnectConfig(w http.ResponseWriter, r *http.Request) {
	cb, nodeID, ok := s.connectNode(w, r)
	if !ok {
		return
	}
	cw, ok := cb.(meshstate.ConfigEntryWriter)
	if !ok {
		writeError(w, http.StatusNotFound, codeConnectNotServed, "%v: config entries are not served by this server", ErrConnectNotServed)
		return
	}
	var req connectConfigRequest
	if !decodeBody(w, r, &req) {
		return
	}
	var (
		out connectConfigResponse
		err error
	)
	switch {
	case req.Op == configOpPut && len(req.Entry) > 0:
		var e configentry.Entry
		if e, err = decodeEntryJSON(req.Entry); err == nil {
			if !s.callerAllowed(w, r, nodeID, "write a config entry", func(a *acl.ACL) bool { return configentry.WriteAllowed(a, e) }) {
				return
			}
			out.OK, out.Index, err = cw.PutConfigEntry(r.Context(), e, req.CAS)
		}
	case req.Op == configOpDelete && req.Kind != "" && req.Name != "":
		if !s.callerAllowed(w, r, nodeID, "delete a config entry", configWriteAllowed(req.Kind, req.Name)) {
			return
		}
		out.OK, out.Index, err = cw.DeleteConfigEntry(r.Context(), configentry.Key{Kind: req.Kind, Name: req.Name}, req.CAS)
	default:
		writeError(w, http.StatusBadRequest, "", "%v: want Op %q with an Entry or %q with Kind and Name", ErrBadRequest, configOpPut, configOpDelete)
		return
	}
	switch {
	case errors.Is(err, configentry.ErrUnknownKind):
		writeError(w, http.StatusBadRequest, codeConfigUnknownKind, "%v", err)
	case errors.Is(err, configentry.ErrConflict):
		writeError(w, http.StatusConflict, codeConfigConflict, "%v", err)
	case errors.Is(err, configentry.ErrInvalid):
		writeError(w, http.StatusBadRequest, codeConfigInvalid, "%v", err)
	case err != nil:
		s.backendError(w, r, false, err)
	default:
		s.logger.Debug("config entry written", "node_id", nodeID, "op", req.Op, "ok", out.OK, "index", out.Index)
		writeJSON(w, &out)
	}
}

// decodeEntryJSON decodes consul/api's JSON of an entry (what
// json.Marshal of the entry made), its kind naming its type.
func decodeEntryJSON(b []byte) (configentry.Entry, error) {
	var head struct{ Kind string }
	if err := json.Unmarshal(b, &head); err != nil {
		return nil, fmt.Errorf("%w: %v", configentry.ErrInvalid, err)
	}
	if !configentry.KnownKind(head.Kind) {
		return nil, fmt.Errorf("%w: %q", configentry.ErrUnknownKind, head.Kind)
	}
	e, err := consul.MakeConfigEntry(head.Kind, "")
	if err != nil {
		return nil, fmt.Errorf("%w: %v", configentry.ErrUnknownKind, err)
	}
	if err := json.Unmarshal(b, e); err != nil {
		return nil, fmt.Errorf("%w: %v", configentry.ErrInvalid, err)
	}
	return e, nil
}

// ConnectConfigEntries returns a meshstate.ConfigEntryWriter over the
// servers: its errors wrap configentry's sentinels as the servers' store
// returned them, with the servers' text.
func (c *Client) ConnectConfigEntries() meshstate.ConfigEntryWriter { return connectConfig{c: c} }

type connectConfig struct{ c *Client }

var _ meshstate.ConfigEntryWriter = connectConfig{}

func (w connectConfig) PutConfigEntry(ctx context.Context, e configentry.Entry, cas *uint64) (bool, uint64, error) {
	if e == nil {
		return false, 0, fmt.Errorf("%w: no config entry", configentry.ErrInvalid)
	}
	b, err := json.Marshal(e)
	if err != nil {
		return false, 0, fmt.Errorf("%w: %v", configentry.ErrInvalid, err)
	}
	what := "write config entry " + configentry.KeyOf(e).String()
	return w.call(ctx, what, connectConfigRequest{Op: configOpPut, Entry: b, CAS: cas})
}

func (w connectConfig) DeleteConfigEntry(ctx context.Context, k configentry.Key, cas *uint64) (bool, uint64, error) {
	return w.call(ctx, "delete config entry "+k.String(), connectConfigRequest{Op: configOpDelete, Kind: k.Kind, Name: k.Name, CAS: cas})
}

func (w connectConfig) call(ctx context.Context, what string, req connectConfigRequest) (bool, uint64, error) {
	var out connectConfigResponse
	if err := w.c.connectCall(ctx, what, http.MethodPost, pathConnectConfig, req, &out); err != nil {
		return false, 0, err
	}
	return out.OK, out.Index, nil
}
