package pubsub

import (
	"sync"
	"testing"
)

func TestPublishOrderAndCancel(t *testing.T) {
	var h Hub[int]
	var got []string
	c1 := h.Subscribe(func(v int) { got = append(got, "a") })
	h.Subscribe(func(v int) { got = append(got, "b") })
	h.Publish(1)
	c1()
	c1() // idempotent
	h.Publish(2)
	want := []string{"a", "b", "b"}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("got %v, want %v", got, want)
		}
	}
	if h.Len() != 1 {
		t.Fatalf("Len = %d, want 1", h.Len())
	}
}

func TestCancelDuringPublishDoesNotCorruptSnapshot(t *testing.T) {
	var h Hub[int]
	var cancels []func()
	calls := 0
	for i := 0; i < 3; i++ {
		cancels = append(cancels, h.Subscribe(func(int) { calls++ }))
	}
	// A subscriber cancelling another while a publish walks the list must
	// not make the walk skip or repeat anyone.
	h.Subscribe(func(int) { cancels[0]() })
	h.Publish(0)
	if calls != 3 {
		t.Fatalf("calls = %d, want 3", calls)
	}
	calls = 0
	h.Publish(0)
	if calls != 2 {
		t.Fatalf("after cancel calls = %d, want 2", calls)
	}
}

func TestConcurrentUse(t *testing.T) {
	var h Hub[int]
	var wg sync.WaitGroup
	var mu sync.Mutex
	total := 0
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cancel := h.Subscribe(func(v int) { mu.Lock(); total += v; mu.Unlock() })
			for j := 0; j < 100; j++ {
				h.Publish(1)
			}
			cancel()
		}()
	}
	wg.Wait()
	if h.Len() != 0 {
		t.Fatalf("Len = %d after all cancels", h.Len())
	}
	if total < 800 {
		t.Fatalf("total = %d, each subscriber should have seen at least its own 100 publishes", total)
	}
}
