package consulapi

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"

	consul "github.com/hashicorp/consul/api"
)

// The official client writes and reads an L7 intention; the check
// endpoint explains which permission decides a request.
func TestL7IntentionThroughOfficialClient(t *testing.T) {
	f := newFixture(t)
	conn := f.client.Connect()
	l7 := []*consul.IntentionPermission{{Action: consul.IntentionActionDeny, HTTP: &consul.IntentionHTTPPermission{PathPrefix: "/admin"}}}
	// Permissions need an HTTP destination: refused while api is tcp.
	_, err := conn.IntentionUpsert(&consul.Intention{SourceName: "web", DestinationName: "api", Permissions: l7}, nil)
	if statusCode(err) != http.StatusBadRequest || !strings.Contains(err.Error(), `api's protocol is "tcp"`) {
		t.Fatalf("L7 intention to a tcp service = %v; want 400 naming the protocol", err)
	}
	if _, _, err := f.client.ConfigEntries().Set(&consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: "api", Protocol: "http"}, nil); err != nil {
		t.Fatal(err)
	}
	in := &consul.Intention{SourceName: "web", DestinationName: "api", Permissions: []*consul.IntentionPermission{
		{Action: consul.IntentionActionDeny, HTTP: &consul.IntentionHTTPPermission{PathPrefix: "/admin"}},
		{Action: consul.IntentionActionAllow, HTTP: &consul.IntentionHTTPPermission{PathPrefix: "/", Methods: []string{"GET"},
			Header: []consul.IntentionHTTPHeaderPermission{{Name: "x-team", Exact: "blue"}}}},
	}}
	if _, err := conn.IntentionUpsert(in, nil); err != nil {
		t.Fatal(err)
	}
	got, _, err := conn.IntentionGetExact("web", "api", nil)
	if err != nil || got == nil || len(got.Permissions) != 2 || got.Permissions[1].HTTP.Header[0].Exact != "blue" || got.Action != "" {
		t.Fatalf("IntentionGetExact = %+v, %v", got, err)
	}
	// Consul's own L4 check: an L7 intention does not allow a connection by itself.
	if allowed, _, err := conn.IntentionCheck(&consul.IntentionCheck{Source: "web", Destination: "api"}, nil); err != nil || allowed {
		t.Fatalf("IntentionCheck = %v, %v; want false", allowed, err)
	}
	cases := []struct {
		query   string
		allowed bool
		reason  string
		perm    int
	}{
		{"method=GET&path=/admin/x", false, "denied by permission 1 of intention web => api (2 permissions): deny when path starts with /admin", 0},
		{"method=GET&path=/list&header=X-Team:blue", true, "allowed by permission 2", 1},
		{"method=GET&path=/list&header=X-Team:red", false, "no permission of intention", -1},
		{"method=POST&path=/list&header=X-Team:blue", false, "default policy", -1},
		{"", false, "its permissions decide each HTTP request", -1},
	}
	for _, c := range cases {
		resp, err := http.Get(f.url + "/v1/connect/intentions/check?source=web&destination=api&" + c.query)
		if err != nil {
			t.Fatal(err)
		}
		var out intentionCheckResponse
		err = json.NewDecoder(resp.Body).Decode(&out)
		resp.Body.Close()
		if err != nil || resp.StatusCode != 200 || out.Allowed != c.allowed || out.Permission != c.perm || !strings.Contains(out.Reason, c.reason) {
			t.Errorf("check %q = %d %+v, %v; want allowed=%v perm=%d reason containing %q", c.query, resp.StatusCode, out, err, c.allowed, c.perm, c.reason)
		}
	}
	resp, err := http.Get(f.url + "/v1/connect/intentions/check?source=web&destination=api&path=" + url.QueryEscape("relative"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("relative path check = %d; want 400", resp.StatusCode)
	}
	// Action and Permissions together are refused and change nothing.
	bad := &consul.Intention{SourceName: "web", DestinationName: "db", Action: consul.IntentionActionAllow,
		Permissions: []*consul.IntentionPermission{{Action: consul.IntentionActionAllow, HTTP: &consul.IntentionHTTPPermission{PathPrefix: "/"}}}}
	if _, err := conn.IntentionUpsert(bad, nil); statusCode(err) != http.StatusBadRequest {
		t.Fatalf("IntentionUpsert(action and permissions) = %v; want 400", err)
	}
}
