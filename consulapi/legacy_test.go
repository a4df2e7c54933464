//lint:file-ignore SA1019 these tests exercise the deprecated ID-based intention endpoints on purpose

package consulapi

import (
	"net/http"
	"testing"

	consul "github.com/hashicorp/consul/api"
)

func TestLegacyIntentionEndpoints(t *testing.T) {
	f := newFixture(t)
	conn := f.client.Connect()
	id, _, err := conn.IntentionCreate(&consul.Intention{SourceName: "api", DestinationName: "cache", Action: consul.IntentionActionAllow}, nil)
	if err != nil || id == "" {
		t.Fatalf("IntentionCreate: %q, %v", id, err)
	}
	byID, _, err := conn.IntentionGet(id, nil)
	if err != nil || byID == nil || byID.SourceName != "api" || byID.Precedence != 9 {
		t.Fatalf("IntentionGet: %+v, %v", byID, err)
	}
	if _, _, err := conn.IntentionCreate(&consul.Intention{SourceName: "api", DestinationName: "cache", Action: consul.IntentionActionDeny}, nil); statusCode(err) != http.StatusConflict {
		t.Fatalf("duplicate IntentionCreate: %v", err)
	}
	if _, _, err := conn.IntentionCreate(&consul.Intention{SourceName: "ap*", DestinationName: "cache", Action: consul.IntentionActionDeny}, nil); statusCode(err) != http.StatusBadRequest {
		t.Fatalf("invalid IntentionCreate: %v", err)
	}
	if _, err := conn.IntentionDelete(id, nil); err != nil {
		t.Fatal(err)
	}
	if gone, _, err := conn.IntentionGet(id, nil); err != nil || gone != nil {
		t.Fatalf("IntentionGet after delete: %+v, %v", gone, err)
	}
	if _, err := conn.IntentionDelete(id, nil); statusCode(err) != http.StatusNotFound {
		t.Fatalf("second delete: %v", err)
	}
	if n := len(f.ix.List()); n != 0 {
		t.Fatalf("store has %d intentions, want 0", n)
	}
}
