package configentry

import (
	"sync/atomic"
	"testing"
)

func TestRegistry(t *testing.T) {
	r := NewRegistry()
	if s, idx := r.Current(); s.Len() != 0 || idx != 0 {
		t.Fatalf("new registry: %d entries at %d", s.Len(), idx)
	}
	var got atomic.Uint64
	cancel := r.Subscribe(func(i uint64) { got.Store(i) })
	r.Replace(NewSet(defaults("web", "http"), resolver("web")), 7)
	if got.Load() != 7 {
		t.Errorf("subscriber saw %d", got.Load())
	}
	s, idx := r.Current()
	if idx != 7 || s.Len() != 2 || s.Protocol("web") != "http" || len(s.List(ServiceResolver)) != 1 {
		t.Errorf("current: %d entries at %d", s.Len(), idx)
	}
	cancel()
	r.Replace(nil, 8)
	if got.Load() != 7 {
		t.Errorf("cancelled subscriber called: %d", got.Load())
	}
	if s, _ := r.Current(); s == nil || s.Len() != 0 {
		t.Errorf("Replace(nil) should install an empty set")
	}
}
