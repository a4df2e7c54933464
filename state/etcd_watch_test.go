package state

import (
	"context"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/meshlet/meshlet/structs"
)

// tcpProxy forwards 127.0.0.1:<port> to the member; stop cuts every
// connection and start listens on the same port again.
type tcpProxy struct {
	addr, target string
	mu           sync.Mutex
	ln           net.Listener
	conns        []net.Conn
	wg           sync.WaitGroup
}

func (p *tcpProxy) start(t *testing.T) {
	t.Helper()
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		t.Fatal(err)
	}
	p.mu.Lock()
	p.ln, p.addr = ln, ln.Addr().String()
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			up, err := net.Dial("tcp", p.target)
			if err != nil {
				_ = c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, up)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(up, c); _ = up.Close() }()
			go func() { _, _ = io.Copy(c, up); _ = c.Close() }()
		}
	}()
}

func (p *tcpProxy) stop() {
	p.mu.Lock()
	_ = p.ln.Close()
	for _, c := range p.conns {
		_ = c.Close()
	}
	p.conns = nil
	p.mu.Unlock()
	p.wg.Wait()
}

// TestEtcdWatchResumesAfterCompaction: a server cut off from etcd while
// others write and the history is compacted past its watch still sees
// the new index once it is back (its watch starts again from a fresh
// read).
func TestEtcdWatchResumesAfterCompaction(t *testing.T) {
	p := &tcpProxy{addr: "127.0.0.1:0", target: testMember.endpoint}
	p.start(t)
	t.Cleanup(func() { p.stop() })
	prefix := testPrefix(t)
	cut := openEtcdTest(t, newClient(t, p.addr), EtcdOptions{Prefix: prefix, RequestTimeout: 2 * time.Second})
	direct := newTestClient(t)
	other := openEtcdTest(t, direct, EtcdOptions{Prefix: prefix})
	if _, err := other.UpsertNode(&structs.Node{ID: "n0"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	start := cut.WaitIndex(ctx, 0)

	p.stop()
	var last uint64
	for i := 0; i < 5; i++ {
		idx, err := other.UpsertNode(&structs.Node{ID: "n1"})
		if err != nil {
			t.Fatal(err)
		}
		last = idx
	}
	resp, err := direct.Get(context.Background(), "compact")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := direct.Compact(context.Background(), resp.Header.Revision); err != nil {
		t.Fatal(err)
	}
	if got := cut.Index(); got != start {
		t.Fatalf("index moved to %d while cut off", got)
	}
	p.start(t)
	if got := cut.WaitIndex(ctx, last-1); got != last {
		t.Fatalf("WaitIndex after reconnect = %d, want %d", got, last)
	}
	// And the watch goes on after its restart.
	idx, err := other.UpsertNode(&structs.Node{ID: "n2"})
	if err != nil {
		t.Fatal(err)
	}
	if got := cut.WaitIndex(ctx, idx-1); got != idx {
		t.Fatalf("WaitIndex after restart = %d, want %d", got, idx)
	}
}
