package consulapi

import (
	"net/http"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/intention"
)

// ?index=0 is not a blocking query in Consul (a client that has seen no
// index yet): it answers at once, even on an empty store whose own index
// is 0.
func TestIndexZeroDoesNotBlock(t *testing.T) {
	f := newFixture(t)
	client := &http.Client{Timeout: 5 * time.Second}
	for _, path := range []string{"/v1/connect/intentions", "/v1/catalog/services", "/v1/config/service-defaults"} {
		start := time.Now()
		resp, err := client.Get(f.url + path + "?index=0&wait=2s")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if took := time.Since(start); resp.StatusCode != http.StatusOK || took > time.Second {
			t.Errorf("GET %s?index=0 = %d after %s; want 200 at once", path, resp.StatusCode, took)
		}
	}
}

// An index that went backwards (this agent restarted: its catalog's index
// starts again from 0; or a mirror was replaced by an older state) answers
// at once, so that the client sees the lower index and starts over, as
// Consul's clients do when the index goes backwards, instead of blocking
// for the whole wait while changes go unseen.
func TestIndexBackwardsAnswersAtOnce(t *testing.T) {
	f := newFixture(t)
	f.registerWeb()
	cur := f.cat.Index()

	// The client's index is from before a restart: ahead of the store's.
	start := time.Now()
	_, meta, err := f.client.Catalog().Services(&consul.QueryOptions{WaitIndex: cur + 1000, WaitTime: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > time.Second || meta.LastIndex != cur {
		t.Fatalf("query with index %d ahead of the catalog's %d answered after %s with index %d; want at once with %d",
			cur+1000, cur, took, meta.LastIndex, cur)
	}

	// The store's index goes backwards while a query waits.
	conn := f.client.Connect()
	for _, src := range []string{"a", "b", "c"} {
		if _, err := conn.IntentionUpsert(&consul.Intention{SourceName: src, DestinationName: "db", Action: consul.IntentionActionAllow}, nil); err != nil {
			t.Fatal(err)
		}
	}
	st := f.ix.State()
	older := intention.State{Index: st.Index - 2, Intentions: st.Intentions[:1]}
	go func() {
		time.Sleep(200 * time.Millisecond)
		if err := f.ix.Replace(older); err != nil {
			t.Error(err)
		}
	}()
	start = time.Now()
	list, meta, err := conn.Intentions(&consul.QueryOptions{WaitIndex: st.Index, WaitTime: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 3*time.Second || meta.LastIndex != older.Index || len(list) != 1 {
		t.Fatalf("query waiting on %d answered after %s with index %d and %d intentions; want soon after the store went back to %d with 1",
			st.Index, took, meta.LastIndex, len(list), older.Index)
	}
}
