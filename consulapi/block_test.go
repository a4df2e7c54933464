package consulapi

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"net/http"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/catalog"
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

// A blocking query waits ?wait= (the default 5m when absent, zero or
// negative, at most 10m) plus Consul's jitter: a random extra below a
// sixteenth of the wait, so that watchers do not all wake together.
func TestBlockWaitJitter(t *testing.T) {
	s := NewServer(Deps{}, nil)
	for _, tc := range []struct {
		raw  string
		base time.Duration
	}{
		{"", defaultWait}, {"0s", defaultWait}, {"-3s", defaultWait}, {"90s", 90 * time.Second}, {"1h", maxWait},
	} {
		s.randN = rand.Int64N
		jittered := false
		for range 200 {
			got, err := s.blockWait(tc.raw)
			if err != nil || got < tc.base || got >= tc.base+tc.base/16 {
				t.Fatalf("wait=%q: %s, %v; want in [%s, %s)", tc.raw, got, err, tc.base, tc.base+tc.base/16)
			}
			jittered = jittered || got > tc.base
		}
		if !jittered {
			t.Errorf("wait=%q: 200 waits were all exactly %s; want jitter", tc.raw, tc.base)
		}
		var asked int64
		s.randN = func(n int64) int64 { asked = n; return n - 1 }
		if got, _ := s.blockWait(tc.raw); asked != int64(tc.base/16) || got != tc.base+tc.base/16-1 {
			t.Errorf("wait=%q with the largest jitter: %s after asking for [0, %d)", tc.raw, got, asked)
		}
	}
	if _, err := s.blockWait("soon"); !errors.Is(err, errBadRequest) {
		t.Errorf("wait=soon: %v, want a bad request", err)
	}
}

// ?wait=0 is no request to answer at once: it blocks (for the default
// wait) until the index moves, as Consul does.
func TestWaitZeroBlocks(t *testing.T) {
	f := newFixture(t)
	f.registerWeb()
	client := &http.Client{Timeout: 10 * time.Second}
	for _, wait := range []string{"0s", "-1s"} {
		cur := f.cat.Index()
		go func() {
			time.Sleep(300 * time.Millisecond)
			f.cat.Register(catalog.ServiceInstance{ID: "api-" + wait, Name: "api", Address: "10.0.0.9", Port: 80, NodeID: "n1", Healthy: true})
		}()
		start := time.Now()
		resp, err := client.Get(fmt.Sprintf("%s/v1/catalog/services?index=%d&wait=%s", f.url, cur, wait))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		took := time.Since(start)
		if resp.StatusCode != http.StatusOK || took < 250*time.Millisecond || resp.Header.Get("X-Consul-Index") == fmt.Sprint(cur) {
			t.Fatalf("wait=%s on index %d: %d after %s with index %s; want 200 once the catalog changed",
				wait, cur, resp.StatusCode, took, resp.Header.Get("X-Consul-Index"))
		}
	}
}
