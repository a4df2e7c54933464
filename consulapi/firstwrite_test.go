package consulapi

import (
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/catalog"
)

// A blocking query on an empty store (intentions, catalog, config
// entries) returns on the store's first write, with a higher index than
// the one it waited on: an empty store reports X-Consul-Index 1 (Consul
// never answers 0), so its first write must take it past 1, or a watcher
// (which ignores a result whose index did not move) never sees it.
func TestBlockingQueryWakesOnFirstWrite(t *testing.T) {
	f, _ := configFixture(t)
	cases := []struct {
		name  string
		query func(q *consul.QueryOptions) (uint64, error)
		write func() error
	}{
		{"intentions", func(q *consul.QueryOptions) (uint64, error) {
			_, meta, err := f.client.Connect().Intentions(q)
			return meta.LastIndex, err
		}, func() error {
			_, err := f.client.Connect().IntentionUpsert(&consul.Intention{SourceName: "a", DestinationName: "b", Action: consul.IntentionActionAllow}, nil)
			return err
		}},
		{"catalog", func(q *consul.QueryOptions) (uint64, error) {
			_, meta, err := f.client.Catalog().Services(q)
			return meta.LastIndex, err
		}, func() error {
			f.cat.Register(catalog.ServiceInstance{ID: "db-1", Name: "db", Address: "10.0.0.3", Port: 5432, NodeID: "n1", Healthy: true})
			return nil
		}},
		{"config entries", func(q *consul.QueryOptions) (uint64, error) {
			_, meta, err := f.client.ConfigEntries().List(consul.ServiceDefaults, q)
			return meta.LastIndex, err
		}, func() error {
			_, _, err := f.client.ConfigEntries().Set(&consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: "web", Protocol: "http"}, nil)
			return err
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			first, err := tc.query(nil)
			if err != nil || first != 1 {
				t.Fatalf("the empty store's index = %d, %v; want 1", first, err)
			}
			go func() {
				time.Sleep(100 * time.Millisecond)
				if err := tc.write(); err != nil {
					t.Error(err)
				}
			}()
			start := time.Now()
			next, err := tc.query(&consul.QueryOptions{WaitIndex: first, WaitTime: 5 * time.Second})
			if err != nil {
				t.Fatal(err)
			}
			if took := time.Since(start); took > 3*time.Second || next <= first {
				t.Fatalf("the blocking query returned after %s with index %d (waited on %d): the first write did not wake it", took, next, first)
			}
		})
	}
}
