package consulapi

import (
	"net/http/httptest"
	"strings"
	"testing"

	consul "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/authz"
	"github.com/meshlet/meshlet/ca"
	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/intention"
)

// /v1/agent/connect/authorize decides a connection and nothing after it:
// a native connect app (Consul's SDK) asks once per TLS connection and
// then serves every request on it. An L7 intention's permissions can
// only be enforced request by request, so it does not authorize the
// connection (Consul answers false too), even when the destination speaks
// HTTP: answering true would let every request through.
func TestAgentAuthorizeL7IntentionFailsClosed(t *testing.T) {
	m, err := ca.New(ca.Config{}, hclog.NewNullLogger(), nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	ix, err := intention.New("", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	az := authz.New(m, ix, nil, nil)
	az.SetProtocols(func(string) string { return "http" })
	srv := NewServer(Deps{Catalog: catalog.New(), CA: m, Intentions: ix, Authz: az}, nil)
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(hs.Close)
	client, err := consul.NewClient(&consul.Config{Address: hs.Listener.Addr().String(), Scheme: "http"})
	if err != nil {
		t.Fatal(err)
	}
	perms := []*intention.Permission{{Action: intention.ActionAllow, HTTP: &intention.HTTPPermission{PathPrefix: "/public", Methods: []string{"GET"}}}}
	if _, err := ix.Upsert(intention.Intention{SourceName: "web", DestinationName: "db", Permissions: perms}, false); err != nil {
		t.Fatal(err)
	}
	if _, err := ix.Upsert(intention.Intention{SourceName: "web", DestinationName: "cache", Action: intention.ActionAllow}, false); err != nil {
		t.Fatal(err)
	}
	got, err := client.Agent().ConnectAuthorize(&consul.AgentAuthorizeParams{Target: "db", ClientCertURI: m.SpiffeID("web")})
	if err != nil {
		t.Fatal(err)
	}
	if got.Authorized || !strings.Contains(got.Reason, "web => db") {
		t.Errorf("ConnectAuthorize(web -> db) with an L7 intention = %+v; want not authorized, naming the intention", got)
	}
	got, err = client.Agent().ConnectAuthorize(&consul.AgentAuthorizeParams{Target: "cache", ClientCertURI: m.SpiffeID("web")})
	if err != nil || !got.Authorized {
		t.Errorf("ConnectAuthorize(web -> cache) with an L4 allow = %+v, %v; want authorized", got, err)
	}
}
