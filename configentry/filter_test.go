package configentry

import (
	"errors"
	"fmt"
	"sync"
	"testing"

	"github.com/meshlet/meshlet/catalog"
)

func TestMatchFilter(t *testing.T) {
	v1 := catalog.ServiceInstance{
		ID: "_nomad-task-a1-web", Name: "service-b", Address: "10.0.0.1", Port: 8080,
		Tags: []string{"blue", "canary"}, Meta: map[string]string{"version": "v1", "zone": "a"},
		NodeID: "node-1", NodeName: "n1", Datacenter: "dc1",
		Checks: []catalog.Check{{ID: "c1", Name: "http", Status: "passing"}},
	}
	bare := catalog.ServiceInstance{ID: "x", Name: "service-b", NodeID: "node-2"}
	cases := []struct {
		filter   string
		inst     catalog.ServiceInstance
		want     bool
		wantsErr bool
	}{
		{"", bare, true, false},
		{"Service.Meta.version == v1", v1, true, false},
		{"Service.Meta.version == v2", v1, false, false},
		{`Service.Meta.version == "v1"`, bare, false, false},
		{"Service.Meta.version != v1", bare, true, false},
		{"Service.Meta.version is empty", bare, true, false},
		{`"canary" in Service.Tags`, v1, true, false},
		{`"canary" in Service.Tags`, bare, false, false},
		{`Service.Tags contains "blue" and Service.Meta.zone == a`, v1, true, false},
		{`not ("blue" in Service.Tags)`, v1, false, false},
		{"Service.Port == 8080 and Service.Address == `10.0.0.1`", v1, true, false},
		{"Service.Service == `service-b` and Service.ID matches `^_nomad-task-`", v1, true, false},
		{"Node.Node == n1 and Node.Datacenter == dc1", v1, true, false},
		{`Node.Node == "node-2"`, bare, true, false},
		{"Node.Meta.rack == r1", v1, false, false},
		{`all Checks as c { c.Status == passing }`, v1, true, false},
		{"Service.Meta.version ==", v1, false, true},
		{"Service.Versions == v1", v1, false, true},
	}
	for _, c := range cases {
		got, err := MatchFilter(c.filter, c.inst)
		if (err != nil) != c.wantsErr || got != c.want {
			t.Errorf("MatchFilter(%q, %s) = %v, %v; want %v (error: %v)", c.filter, c.inst.ID, got, err, c.want, c.wantsErr)
		}
		if err != nil && !errors.Is(err, ErrInvalid) {
			t.Errorf("error %v does not wrap ErrInvalid", err)
		}
		if verr := ValidateFilter(c.filter); (verr != nil) != c.wantsErr {
			t.Errorf("ValidateFilter(%q) = %v", c.filter, verr)
		}
	}
}

func TestFilterCache(t *testing.T) {
	f := "Service.Meta.version == cached"
	a, err := compileFilter(f)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := compileFilter(f)
	if a != b {
		t.Error("compiled filter not reused")
	}
	_, err1 := compileFilter("((")
	_, err2 := compileFilter("((")
	if err1 == nil || err1 != err2 {
		t.Errorf("bad filter errors not cached: %v %v", err1, err2)
	}
}

func BenchmarkMatchFilter(b *testing.B) {
	inst := catalog.ServiceInstance{ID: "a", Name: "web", Meta: map[string]string{"version": "v2"}, Tags: []string{"x"}}
	for b.Loop() {
		if ok, err := MatchFilter("Service.Meta.version == v2", inst); !ok || err != nil {
			b.Fatal(ok, err)
		}
	}
}

// xDS builds evaluate filters from many goroutines at once.
func TestMatchFilterConcurrent(t *testing.T) {
	inst := catalog.ServiceInstance{ID: "a", Name: "web", Meta: map[string]string{"version": "v2"}}
	var wg sync.WaitGroup
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for i := 0; i < 200; i++ {
				f := fmt.Sprintf("Service.Meta.version == v%d", (g+i)%4)
				ok, err := MatchFilter(f, inst)
				if err != nil || ok != ((g+i)%4 == 2) {
					t.Errorf("%s: %v %v", f, ok, err)
					return
				}
			}
		}(g)
	}
	wg.Wait()
}
