package consulapi

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"time"

	"github.com/meshlet/meshlet/acl"
	"github.com/meshlet/meshlet/ca"
)

// The CA configuration endpoints, in Consul's shapes
// (api.Connect().CAGetConfig and CASetConfig):
//
//   - GET /v1/connect/ca/configuration answers {Provider: "consul",
//     Config: {LeafCertTTL, PrivateKeyType, PrivateKeyBits},
//     ForceWithoutCrossSigning, CreateIndex, ModifyIndex}; both indexes are
//     the active root's CreateIndex (the configuration changes only by
//     rotating), and ?index= blocks until the next rotation.
//   - PUT /v1/connect/ca/configuration takes Consul's CAConfig. Provider
//     must be "consul" (meshlet's built-in CA); State must be empty and
//     Config may not carry PrivateKey or RootCert (meshlet makes its own
//     root keys). EVERY accepted PUT rotates the root: a new root key,
//     cross-signed by the old root, as Consul's built-in provider does when
//     its configuration changes. Config may hold only what GET answers,
//     with the values GET answers: the leaf TTL is the signing servers'
//     connect.leaf_ttl, fixed when their CA starts (it is not in the
//     cluster's CA state, and the root overlap derives from it), and the
//     only key type is ec P-256. Another value, or another Consul field
//     (RotationPeriod, RootCertTTL...), is a 400 naming the field and what
//     is supported, and rotates nothing: no value is accepted and ignored.
//
// The LeafCertTTL GET reports is the TTL leaves are actually signed with
// (ca.Manager.LeafTTL: on a client agent the servers', as seen on the
// leaves they signed).
//
// On a client agent the rotation is made by a server (Deps.RotateCA goes
// through the RPC port); the PUT returns once the new root is stored, and
// this agent's own roots follow through the mesh feed shortly after.

// caProvider is the only provider meshlet has: its built-in CA.
const caProvider = "consul"

// maxRotateConflicts bounds the attempts of a rotation that lost a race
// with another server's change to the CA state (the CA reloaded it). This
// is the one retry loop of a rotation: a client agent's Deps.RotateCA
// (an RPC to a server) tries once and reports ca.ErrStateConflict.
const maxRotateConflicts = 3

// caConfig is Consul's CAConfig shape.
type caConfig struct {
	Provider                 string
	Config                   map[string]any
	State                    map[string]string `json:",omitempty"`
	ForceWithoutCrossSigning bool
	CreateIndex              uint64
	ModifyIndex              uint64
}

// caDurationKeys are the Config fields of Consul's built-in provider that
// hold durations (a Go duration string or nanoseconds).
var caDurationKeys = map[string]bool{
	"LeafCertTTL": true, "RootCertTTL": true, "IntermediateCertTTL": true, "RotationPeriod": true,
}

// configIndex is the index of the CA configuration: the active root's
// CreateIndex (a rotation is the only change).
func configIndex(rs ca.Roots) uint64 {
	for _, r := range rs.Roots {
		if r.Active {
			return r.CreateIndex
		}
	}
	return 0
}

// currentCAConfig is what GET answers.
func (s *Server) currentCAConfig(ctx context.Context) caConfig {
	idx := max(configIndex(s.d.CA.Roots()), 1)
	return caConfig{
		Provider: caProvider,
		Config: map[string]any{
			"LeafCertTTL":    s.d.CA.LeafTTL().String(),
			"PrivateKeyType": "ec",
			"PrivateKeyBits": 256,
		},
		CreateIndex: idx, ModifyIndex: idx,
	}
}

// GET /v1/connect/ca/configuration.
func (s *Server) caConfigGet(w http.ResponseWriter, r *http.Request) {
	if err := s.caWait(r, func() uint64 { return configIndex(s.d.CA.Roots()) }); err != nil {
		s.failFor(w, r, err)
		return
	}
	cfg := s.currentCAConfig(r.Context())
	s.writeJSON(w, r, cfg.ModifyIndex, cfg)
}

// PUT /v1/connect/ca/configuration: checks the body and rotates the root.
func (s *Server) caConfigSet(w http.ResponseWriter, r *http.Request) {
	var in caConfig
	if err := decodeBody(r, &in); err != nil {
		s.failFor(w, r, err)
		return
	}
	if err := checkCAConfig(in, s.currentCAConfig(r.Context())); err != nil {
		s.failFor(w, r, err)
		return
	}
	rotate := s.rotator()
	if rotate == nil {
		s.fail(w, r, http.StatusNotImplemented, errors.New("this agent cannot rotate the CA root"))
		return
	}
	prev := s.d.CA.Roots().ActiveRootID
	if err := rotateRetrying(r.Context(), rotate); err != nil {
		code := http.StatusInternalServerError
		switch {
		case errors.Is(err, ca.ErrStateConflict):
			code = http.StatusConflict
		case errors.Is(err, ca.ErrClosed):
			code = http.StatusServiceUnavailable
		case errors.Is(err, acl.ErrPermissionDenied), errors.Is(err, acl.ErrTokenNotFound):
			code = http.StatusForbidden
		}
		s.fail(w, r, code, err)
		return
	}
	s.logger.Info("rotated the CA root through the connect API", "previous_root_id", prev)
	setIndex(w, configIndex(s.d.CA.Roots()))
	w.WriteHeader(http.StatusOK)
}

// rotator is Deps.RotateCA, or the CA's own Rotate when it has one.
func (s *Server) rotator() func(context.Context) error {
	if s.d.RotateCA != nil {
		return s.d.RotateCA
	}
	if rc, ok := s.d.CA.(interface{ Rotate(context.Context) error }); ok {
		return rc.Rotate
	}
	return nil
}

// rotateRetrying rotates, again when the rotation lost a race with another
// server's change (the CA reloaded the stored state meanwhile).
func rotateRetrying(ctx context.Context, rotate func(context.Context) error) error {
	var err error
	for range maxRotateConflicts {
		if err = rotate(ctx); !errors.Is(err, ca.ErrStateConflict) {
			return err
		}
	}
	return err
}

// checkCAConfig refuses what meshlet cannot apply: another provider, a
// State, a root key or certificate, and in Config any field GET does not
// answer or a value other than the one it answers (cur).
func checkCAConfig(in, cur caConfig) error {
	if in.Provider != caProvider {
		return badRequest("CA provider %q is not supported: meshlet's built-in CA is provider %q", in.Provider, caProvider)
	}
	if len(in.State) > 0 {
		return badRequest("State is read-only and must not be set")
	}
	keys := make([]string, 0, len(in.Config))
	for k := range in.Config {
		keys = append(keys, k)
	}
	sort.Strings(keys) // the same field is named first every time
	for _, k := range keys {
		if err := checkCAConfigField(k, in.Config[k], cur); err != nil {
			return err
		}
	}
	return nil
}

// checkCAConfigField checks Config field k of a PUT against cur.
func checkCAConfigField(k string, v any, cur caConfig) error {
	switch {
	case k == "PrivateKey" || k == "RootCert":
		if s, ok := v.(string); !ok || s != "" {
			return badRequest("Config.%s is not supported: meshlet's CA generates its own root keys", k)
		}
		return nil
	case caDurationKeys[k]:
		d, err := configDuration(v)
		if err != nil {
			return badRequest("Config.%s: %v", k, err)
		}
		if k != "LeafCertTTL" {
			break
		}
		if d.String() != fmt.Sprint(cur.Config[k]) {
			return badRequest("Config.LeafCertTTL %s cannot be set through the API: leaves are signed for the servers' connect.leaf_ttl (%v); change it there", d, cur.Config[k])
		}
		return nil
	case k == "PrivateKeyType" || k == "PrivateKeyBits":
		if fmt.Sprint(v) != fmt.Sprint(cur.Config[k]) {
			return badRequest("Config.%s %v is not supported: meshlet's CA supports only PrivateKeyType %q with PrivateKeyBits %v (ECDSA P-256)",
				k, v, cur.Config["PrivateKeyType"], cur.Config["PrivateKeyBits"])
		}
		return nil
	}
	return badRequest("Config.%s is not supported: meshlet's CA takes only LeafCertTTL, PrivateKeyType and PrivateKeyBits, as get-config shows them", k)
}

// configDuration reads a duration as Consul's mapstructure decoding does:
// a Go duration string or a number of nanoseconds.
func configDuration(v any) (time.Duration, error) {
	var d time.Duration
	switch x := v.(type) {
	case string:
		var err error
		if d, err = time.ParseDuration(x); err != nil {
			return 0, fmt.Errorf("invalid duration %q", x)
		}
	case float64:
		d = time.Duration(x)
	default:
		return 0, fmt.Errorf("want a duration such as \"72h\", got %v", v)
	}
	if d < 0 {
		return 0, fmt.Errorf("negative duration %s", d)
	}
	return d, nil
}
