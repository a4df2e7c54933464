package rpc

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/acl"
	"github.com/meshlet/meshlet/configentry"
	"github.com/meshlet/meshlet/intention"
)

// secretACLs resolves test secrets to ACLs compiled from real policies;
// "" is an anonymous token allowed nothing.
type secretACLs map[string]string

func (m secretACLs) Resolve(_ context.Context, secret string) (*acl.ACL, *acl.Token, error) {
	rules, ok := m[secret]
	if !ok && secret != "" {
		return nil, nil, fmt.Errorf("%w: no token for that secret", acl.ErrTokenNotFound)
	}
	var ps []*acl.Policy
	if rules != "" {
		ps = append(ps, &acl.Policy{Name: "p", Rules: rules})
	}
	a, err := acl.NewACL(false, ps)
	return a, &acl.Token{AccessorID: "acc-" + secret}, err
}

// as is a context carrying secret, as the connect API's requests do.
func as(t *testing.T, secret string) context.Context {
	return acl.ContextWithSecret(ctxT(t, 10*time.Second), secret)
}

// With ACLs the servers judge a client agent's intention, config entry
// and CA rotation writes with the caller's token it forwards, as the
// connect API does: node credentials alone write nothing.
func TestMeshWritesNeedTheCallersToken(t *testing.T) {
	m, cc := newConfigMeshFixture(t)
	m.s.cfg.Tokens = secretACLs{
		"db-ix":  "service \"db\" {\n policy = \"read\"\n intentions = \"write\"\n}",
		"web-ix": "service \"web\" {\n policy = \"read\"\n intentions = \"write\"\n}",
		"db-svc": `service "db" { policy = "write" }`,
		"op":     `operator { policy = "write" }`,
	}
	iw := m.c.ConnectIntentions()
	web2db := intention.Intention{SourceName: "web", DestinationName: "db", Action: intention.ActionAllow}
	for _, c := range []struct {
		name, secret string
		want         error
	}{
		{"no token", "", acl.ErrPermissionDenied},
		{"an unknown token", "forged", acl.ErrTokenNotFound},
		{"intention write on another destination", "web-ix", acl.ErrPermissionDenied},
	} {
		if _, _, err := iw.Upsert(as(t, c.secret), web2db, false); !errors.Is(err, c.want) {
			t.Errorf("intention web->db with %s: %v, want %v", c.name, err, c.want)
		}
	}
	saved, _, err := iw.Upsert(as(t, "db-ix"), web2db, false)
	if err != nil {
		t.Fatalf("intention web->db with intention write on db: %v", err)
	}
	// By ID the stored intention's destination decides: web's token may
	// neither delete it nor move it onto web.
	if _, _, err := iw.DeleteByID(as(t, "web-ix"), saved.ID, nil); !errors.Is(err, acl.ErrPermissionDenied) {
		t.Errorf("delete db's intention by ID with web's token: %v", err)
	}
	moved := saved
	moved.DestinationName = "web"
	if _, _, err := iw.Upsert(as(t, "web-ix"), moved, true); !errors.Is(err, acl.ErrPermissionDenied) {
		t.Errorf("move db's intention onto web with web's token: %v", err)
	}
	if _, _, err := iw.UpdateByID(as(t, "web-ix"), saved.ID, moved, nil); !errors.Is(err, acl.ErrPermissionDenied) {
		t.Errorf("update db's intention by ID onto web with web's token: %v", err)
	}
	if _, _, err := iw.UpdateByID(as(t, "web-ix"), saved.ID, saved, nil); !errors.Is(err, acl.ErrPermissionDenied) {
		t.Errorf("update db's intention by ID with web's token: %v", err)
	}
	renamed := saved
	renamed.SourceName, renamed.Action = "api", intention.ActionDeny
	if up, _, err := iw.UpdateByID(as(t, "db-ix"), saved.ID, renamed, nil); err != nil || up.ID != saved.ID || up.SourceName != "api" {
		t.Errorf("update db's intention by ID with intention write on db: %+v, %v", up, err)
	}
	if _, _, err := iw.Delete(as(t, "db-ix"), "api", "db"); err != nil {
		t.Errorf("delete web->db with intention write on db: %v", err)
	}

	if err := m.c.RotateCA(as(t, "db-ix")); !errors.Is(err, acl.ErrPermissionDenied) {
		t.Errorf("CA rotation without operator write: %v", err)
	}
	if err := m.c.RotateCA(as(t, "op")); err != nil {
		t.Errorf("CA rotation with operator write: %v", err)
	}

	cw := m.c.ConnectConfigEntries()
	e := &consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: "db", Protocol: "http"}
	_, _, err = cw.PutConfigEntry(as(t, "web-ix"), e, nil)
	if !errors.Is(err, acl.ErrPermissionDenied) {
		t.Errorf("db's service-defaults without service write on db: %v", err)
	}
	if ok, _, err := cw.PutConfigEntry(as(t, "db-svc"), e, nil); err != nil || !ok {
		t.Errorf("db's service-defaults with service write on db: %v, %v", ok, err)
	}
	_, _, err = cw.DeleteConfigEntry(as(t, ""), configentry.Key{Kind: consul.ServiceDefaults, Name: "db"}, nil)
	if !errors.Is(err, acl.ErrPermissionDenied) {
		t.Errorf("delete db's service-defaults without a token: %v", err)
	}
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.set.Get(consul.ServiceDefaults, "db") == nil || cc.index != 1 {
		t.Errorf("config state after the writes: index %d, want only the allowed write made", cc.index)
	}
}
