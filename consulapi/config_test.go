package consulapi

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"
	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/configentry"
)

// configFixture serves the API over a registry with the in-memory writer.
func configFixture(t *testing.T) (*fixture, *configentry.Registry) {
	t.Helper()
	f := newFixture(t) // the CA, intentions and catalog of the usual fixture
	reg := configentry.NewRegistry()
	srv := NewServer(Deps{Catalog: f.cat, CA: f.ca, Intentions: f.ix, ConfigEntries: reg}, hclog.NewNullLogger())
	t.Cleanup(srv.Close)
	hs := httptest.NewServer(srv.Handler()) // 127.0.0.1:0
	t.Cleanup(hs.Close)
	client, err := consul.NewClient(&consul.Config{Address: hs.Listener.Addr().String(), Scheme: "http"})
	if err != nil {
		t.Fatal(err)
	}
	f.url, f.client = hs.URL, client
	return f, reg
}

func TestConfigEntriesOfficialClient(t *testing.T) {
	f, reg := configFixture(t)
	ce := f.client.ConfigEntries()
	ok, wm, err := ce.Set(&consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: "web", Protocol: "http"}, nil)
	if err != nil || !ok || wm == nil {
		t.Fatalf("Set = %v, %v", ok, err)
	}
	if _, _, err := ce.Set(&consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: "api", Protocol: "grpc"}, nil); err != nil {
		t.Fatal(err)
	}
	got, qm, err := ce.Get(consul.ServiceDefaults, "web", nil)
	if err != nil {
		t.Fatal(err)
	}
	web, isSD := got.(*consul.ServiceConfigEntry)
	if !isSD || web.Protocol != "http" || web.ModifyIndex == 0 || web.CreateIndex != web.ModifyIndex {
		t.Fatalf("Get = %#v", got)
	}
	if _, i := reg.Current(); qm.LastIndex != i {
		t.Fatalf("X-Consul-Index = %d, want the registry's %d", qm.LastIndex, i)
	}
	list, _, err := ce.List(consul.ServiceDefaults, nil)
	if err != nil || len(list) != 2 || list[0].GetName() != "api" || list[1].GetName() != "web" {
		t.Fatalf("List = %v, %v; want api, web", list, err)
	}
	if list, _, err := ce.List(consul.ServiceRouter, nil); err != nil || len(list) != 0 {
		t.Fatalf("List of an empty kind = %v, %v", list, err)
	}

	// Check-and-set.
	upd := &consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: "web", Protocol: "http2"}
	if ok, _, err := ce.CAS(upd, 0, nil); err != nil || ok {
		t.Fatalf("CAS 0 over an existing entry = %v, %v; want false", ok, err)
	}
	if ok, _, err := ce.CAS(upd, web.ModifyIndex+1000, nil); err != nil || ok {
		t.Fatalf("CAS with a stale index = %v, %v; want false", ok, err)
	}
	if ok, _, err := ce.CAS(upd, web.ModifyIndex, nil); err != nil || !ok {
		t.Fatalf("CAS at the entry's index = %v, %v", ok, err)
	}
	got, _, _ = ce.Get(consul.ServiceDefaults, "web", nil)
	if e := got.(*consul.ServiceConfigEntry); e.Protocol != "http2" || e.CreateIndex != web.CreateIndex || e.ModifyIndex <= web.ModifyIndex {
		t.Fatalf("after CAS: %#v", e)
	}

	// Delete.
	if ok, _, err := ce.DeleteCAS(consul.ServiceDefaults, "web", 1, nil); err != nil || ok {
		t.Fatalf("DeleteCAS with a stale index = %v, %v", ok, err)
	}
	if _, err := ce.Delete(consul.ServiceDefaults, "web", nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := ce.Get(consul.ServiceDefaults, "web", nil); err == nil || !strings.Contains(err.Error(), "404") {
		t.Fatalf("Get of a deleted entry = %v, want 404", err)
	}
	if _, err := ce.Delete(consul.ServiceDefaults, "web", nil); err != nil {
		t.Fatalf("Delete of an absent entry = %v", err)
	}
	set, _ := reg.Current()
	if set.Len() != 1 || set.Get(consul.ServiceDefaults, "api") == nil {
		t.Fatalf("registry = %v", set.List(""))
	}
}

// A blocking Get (?index=) returns when a write moves the index.
func TestConfigEntriesBlockingGet(t *testing.T) {
	f, _ := configFixture(t)
	ce := f.client.ConfigEntries()
	if _, _, err := ce.Set(&consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: "web", Protocol: "tcp"}, nil); err != nil {
		t.Fatal(err)
	}
	_, qm, err := ce.Get(consul.ServiceDefaults, "web", nil)
	if err != nil {
		t.Fatal(err)
	}
	type result struct {
		e     consul.ConfigEntry
		index uint64
		took  time.Duration
		err   error
	}
	done := make(chan result, 1)
	go func() {
		start := time.Now()
		e, m, err := ce.Get(consul.ServiceDefaults, "web", &consul.QueryOptions{WaitIndex: qm.LastIndex, WaitTime: 10 * time.Second})
		r := result{e: e, took: time.Since(start), err: err}
		if m != nil {
			r.index = m.LastIndex
		}
		done <- r
	}()
	time.Sleep(300 * time.Millisecond)
	select {
	case r := <-done:
		t.Fatalf("blocking Get returned before any write: %+v", r)
	default:
	}
	if _, _, err := ce.Set(&consul.ServiceConfigEntry{Kind: consul.ServiceDefaults, Name: "web", Protocol: "http"}, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case r := <-done:
		if r.err != nil || r.index <= qm.LastIndex || r.e.(*consul.ServiceConfigEntry).Protocol != "http" {
			t.Fatalf("woken Get = %+v", r)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the write did not wake the blocking Get")
	}
}

// Bad entries are 400 with a one-line message and change nothing.
func TestConfigEntriesBadRequests(t *testing.T) {
	f, reg := configFixture(t)
	_, before := reg.Current()
	cases := []struct{ method, path, body string }{
		{"PUT", "/v1/config", `{"Kind":"service-nope","Name":"x"}`},
		{"PUT", "/v1/config", `{"Kind":"service-defaults",`},
		{"PUT", "/v1/config", `{"Kind":"service-defaults","Name":"x"} {}`},
		{"PUT", "/v1/config?cas=x", `{"Kind":"service-defaults","Name":"x"}`},
		{"PUT", "/v1/config", `{"Kind":"service-defaults","Name":""}`},
		{"GET", "/v1/config/service-nope", ``},
		{"GET", "/v1/config/service-nope/x", ``},
		{"DELETE", "/v1/config/service-nope/x", ``},
		{"GET", "/v1/config/service-defaults?index=zz", ``},
	}
	for _, c := range cases {
		req, _ := http.NewRequest(c.method, f.url+c.path, strings.NewReader(c.body))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		msg := strings.TrimSuffix(string(b), "\n")
		if resp.StatusCode != http.StatusBadRequest || msg == "" || strings.Contains(msg, "\n") {
			t.Errorf("%s %s %s = %d %q; want 400 with one line", c.method, c.path, c.body, resp.StatusCode, msg)
		}
	}
	if set, after := reg.Current(); after != before || set.Len() != 0 {
		t.Fatalf("bad requests changed the registry: %v at %d", set.List(""), after)
	}
	// Lower-case keys, as `config write` accepts.
	req, _ := http.NewRequest("PUT", f.url+"/v1/config", strings.NewReader(`{"kind":"service-defaults","name":"api","protocol":"grpc"}`))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || strings.TrimSpace(string(b)) != "true" || resp.Header.Get("X-Consul-Index") == "" {
		t.Fatalf("lower-case PUT = %d %s", resp.StatusCode, b)
	}
	if e, ok := mustCurrent(reg).Get("service-defaults", "api").(*consul.ServiceConfigEntry); !ok || e.Protocol != "grpc" {
		t.Fatalf("registry after a lower-case PUT = %v", mustCurrent(reg).List(""))
	}
}

func mustCurrent(reg *configentry.Registry) *configentry.Set {
	set, _ := reg.Current()
	return set
}
