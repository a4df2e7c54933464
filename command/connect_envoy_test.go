package command

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// fakeConnectCatalog serves /v1/catalog/services and
// /v1/catalog/service/<name> for the given proxies (service name -> IDs
// with their destination service ID) and points MESHLET_CONNECT_ADDR at it.
func fakeConnectCatalog(t *testing.T, proxies map[string]map[string]string) {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/catalog/services" {
			names := map[string][]string{}
			for name := range proxies {
				names[name] = nil
			}
			_ = json.NewEncoder(w).Encode(names)
			return
		}
		name, ok := strings.CutPrefix(r.URL.Path, "/v1/catalog/service/")
		if !ok {
			http.NotFound(w, r)
			return
		}
		entries := []map[string]any{}
		for id, dest := range proxies[name] {
			entries = append(entries, map[string]any{
				"Node": "n-" + id, "ServiceID": id, "ServiceName": name, "ServiceKind": "connect-proxy",
				"ServiceProxy": map[string]any{"DestinationServiceName": strings.TrimSuffix(name, "-sidecar-proxy"), "DestinationServiceID": dest},
			})
		}
		_ = json.NewEncoder(w).Encode(entries)
	}))
	t.Cleanup(srv.Close)
	t.Setenv("MESHLET_CONNECT_ADDR", srv.URL)
}

// TestConnectEnvoySidecarForAmbiguous: as `consul connect envoy`, a
// -sidecar-for that more than one proxy serves is an error naming them
// (not a bootstrap for whichever the catalog listed first), -proxy-id and
// -sidecar-for together are refused, and a single match bootstraps.
func TestConnectEnvoySidecarForAmbiguous(t *testing.T) {
	fakeConnectCatalog(t, map[string]map[string]string{
		"web-sidecar-proxy": {"web-1-sidecar-proxy": "web-1", "web-1-sidecar-proxy-b": "web-1", "web-2-sidecar-proxy": "web-2"},
	})
	r := runCLI(t, "", "connect", "envoy", "-bootstrap", "-sidecar-for", "web-1")
	if r.code == 0 || !strings.Contains(r.stderr, "web-1-sidecar-proxy") || !strings.Contains(r.stderr, "web-1-sidecar-proxy-b") ||
		!strings.Contains(r.stderr, "-proxy-id") {
		t.Errorf("ambiguous -sidecar-for: code %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, "", "connect", "envoy", "-bootstrap", "-sidecar-for", "web-2", "-proxy-id", "web-1-sidecar-proxy")
	if r.code == 0 || !strings.Contains(r.stderr, "mutually exclusive") {
		t.Errorf("-proxy-id with -sidecar-for: code %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, "", "connect", "envoy", "-bootstrap", "-sidecar-for", "web-2")
	b := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal([]byte(r.stdout), b); err != nil || r.code != 0 {
		t.Fatalf("-sidecar-for web-2: code %d err %v stderr %q", r.code, err, r.stderr)
	}
	if b.GetNode().GetId() != "web-2-sidecar-proxy" || b.GetNode().GetCluster() != "web" {
		t.Errorf("node = %v, want web-2-sidecar-proxy/web", b.GetNode())
	}
}
