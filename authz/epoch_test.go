package authz

import (
	"context"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"

	"github.com/meshlet/meshlet/intention"
	"github.com/meshlet/meshlet/sidecar"
)

func (f *fixture) epochOf(t *testing.T, req *authv3.CheckRequest) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := f.client.Check(ctx, req)
	if err != nil {
		t.Fatalf("Check RPC: %v", err)
	}
	return resp.GetDynamicMetadata().GetFields()[EpochKey].GetStringValue()
}

// TestEpochMarksPairDecidedAllows: an allow decided by the pair alone
// carries the epoch, over gRPC; denials and L7-decided answers do not; the
// epoch moves (subscribers told, in order) after every intention change.
func TestEpochMarksPairDecidedAllows(t *testing.T) {
	f := newFixture(t, true)
	id := f.ca.SpiffeID
	var seen []string
	cancel := f.svc.SubscribeEpoch(func(e string) { seen = append(seen, e) })
	defer cancel()
	if len(seen) != 1 || seen[0] != f.svc.Epoch() {
		t.Fatalf("subscriber got %v, want the current epoch %q at once", seen, f.svc.Epoch())
	}
	e1 := f.svc.Epoch()
	if got := f.epochOf(t, request(id("web"), id("db"))); got != e1 {
		t.Fatalf("default-allow connection marked %q, want %q", got, e1)
	}
	if got := f.epochOf(t, httpRequest(id("web"), id("db"), "GET", "/x", nil)); got != e1 {
		t.Fatalf("default-allow request marked %q, want %q", got, e1)
	}

	f.upsert(t, "web", "db", "deny")
	if len(seen) != 2 || seen[1] == e1 || seen[1] != f.svc.Epoch() {
		t.Fatalf("after an intention change the subscriber saw %v (current %q)", seen, f.svc.Epoch())
	}
	if got := f.epochOf(t, request(id("web"), id("db"))); got != "" {
		t.Fatalf("a deny was marked cacheable (%q)", got)
	}

	if _, err := f.ix.Upsert(intention.Intention{SourceName: "web", DestinationName: "api", Permissions: []*intention.Permission{
		{Action: "allow", HTTP: &intention.HTTPPermission{PathPrefix: "/"}},
	}}, true); err != nil {
		t.Fatal(err)
	}
	f.svc.SetProtocols(func(string) string { return "http" })
	if got := f.epochOf(t, httpRequest(id("web"), id("api"), "GET", "/x", nil)); got != "" {
		t.Fatalf("an allow decided by an L7 permission was marked cacheable (%q)", got)
	}
	if got := f.epochOf(t, request(id("web"), id("api"))); got != "" {
		t.Fatalf("a connection admitted for per-request checks was marked cacheable (%q)", got)
	}

	cancel()
	before := f.svc.Epoch()
	f.upsert(t, "web", "db", "allow")
	if len(seen) != 3 || f.svc.Epoch() != before {
		t.Fatalf("after cancel: subscriber saw %v, epoch %q -> %q; want no calls and no move", seen, before, f.svc.Epoch())
	}
}

// TestEpochNamesMatchSidecar: the sidecar reads what this package writes.
func TestEpochNamesMatchSidecar(t *testing.T) {
	if EpochResource != sidecar.AuthzEpochResource || EpochKey != sidecar.AuthzEpochKey {
		t.Fatalf("authz (%q, %q) and sidecar (%q, %q) disagree", EpochResource, EpochKey, sidecar.AuthzEpochResource, sidecar.AuthzEpochKey)
	}
}
