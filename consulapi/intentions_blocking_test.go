//lint:file-ignore SA1019 IntentionGet (by ID) is deprecated but still served

package consulapi

import (
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"
)

// GET /v1/connect/intentions/exact and /v1/connect/intentions/{id} are
// blocking queries in Consul: with ?index= at the current index they wait
// for a change (or ?wait=) instead of answering at once, which would turn
// a watcher into a busy loop. A missing intention answers 404 with the
// index too, so that a watcher waiting for it to appear can block.
func TestIntentionReadsBlock(t *testing.T) {
	f := newFixture(t)
	conn := f.client.Connect()
	if _, err := conn.IntentionUpsert(&consul.Intention{SourceName: "web", DestinationName: "db", Action: consul.IntentionActionAllow}, nil); err != nil {
		t.Fatal(err)
	}
	in, meta, err := conn.IntentionGetExact("web", "db", nil)
	if err != nil || in == nil {
		t.Fatalf("IntentionGetExact: %+v, %v", in, err)
	}
	idx := meta.LastIndex
	reads := map[string]func(q *consul.QueryOptions) (*consul.Intention, *consul.QueryMeta, error){
		"exact": func(q *consul.QueryOptions) (*consul.Intention, *consul.QueryMeta, error) {
			return conn.IntentionGetExact("web", "db", q)
		},
		"by ID": func(q *consul.QueryOptions) (*consul.Intention, *consul.QueryMeta, error) {
			return conn.IntentionGet(in.ID, q)
		},
		"missing": func(q *consul.QueryOptions) (*consul.Intention, *consul.QueryMeta, error) {
			return conn.IntentionGetExact("api", "db", q)
		},
	}
	for name, read := range reads {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			_, m, err := read(&consul.QueryOptions{WaitIndex: idx, WaitTime: 300 * time.Millisecond})
			if err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took < 250*time.Millisecond {
				t.Fatalf("the read at the current index %d answered after %s: it did not block", idx, took)
			}
			if m.LastIndex != idx {
				t.Fatalf("index = %d, want %d", m.LastIndex, idx)
			}
		})
	}

	// A change wakes a blocked read, which then sees it.
	go func() {
		time.Sleep(100 * time.Millisecond)
		if _, err := conn.IntentionUpsert(&consul.Intention{SourceName: "web", DestinationName: "db", Action: consul.IntentionActionDeny}, nil); err != nil {
			t.Error(err)
		}
	}()
	start := time.Now()
	got, m, err := conn.IntentionGetExact("web", "db", &consul.QueryOptions{WaitIndex: idx, WaitTime: 10 * time.Second})
	if err != nil || got == nil {
		t.Fatalf("blocked IntentionGetExact: %+v, %v", got, err)
	}
	if took := time.Since(start); took > 5*time.Second || m.LastIndex <= idx || got.Action != consul.IntentionActionDeny {
		t.Fatalf("blocked read returned after %s with index %d (waited on %d) and action %q", took, m.LastIndex, idx, got.Action)
	}
}

// Deleting by name is idempotent in Consul (1.9+): deleting a pair that
// has no intention succeeds and changes nothing.
func TestIntentionDeleteExactIdempotent(t *testing.T) {
	f := newFixture(t)
	conn := f.client.Connect()
	if _, err := conn.IntentionUpsert(&consul.Intention{SourceName: "web", DestinationName: "db", Action: consul.IntentionActionAllow}, nil); err != nil {
		t.Fatal(err)
	}
	index := f.ix.Index()
	if _, err := conn.IntentionDeleteExact("api", "db", nil); err != nil {
		t.Fatalf("IntentionDeleteExact of a missing intention: %v; want success", err)
	}
	if f.ix.Index() != index || len(f.ix.List()) != 1 {
		t.Fatalf("deleting a missing intention changed the store")
	}
	for range 2 {
		if _, err := conn.IntentionDeleteExact("web", "db", nil); err != nil {
			t.Fatalf("IntentionDeleteExact(web, db): %v", err)
		}
	}
	if n := len(f.ix.List()); n != 0 {
		t.Fatalf("store has %d intentions, want 0", n)
	}
}
