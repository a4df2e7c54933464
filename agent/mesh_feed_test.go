package agent

import (
	"context"
	"net"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/meshlet/meshlet/meshstate"
)

// The feed a server relays to client agents ends when the server cannot
// read its etcd, so that the client follows another server; Store.Follow
// (the server's own mirror) would wait for etcd while the stream's
// keepalives kept the client on stale state.
func TestConnectBackendFollowEndsWhenEtcdFails(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there: etcd is unreachable
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{"http://" + addr}, DialTimeout: time.Second, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cli.Close() })
	st := meshstate.Open(cli, meshstate.Options{Prefix: "/t/", RequestTimeout: 300 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		done <- connectBackend{Store: st}.Follow(ctx, func(meshstate.Batch) error { return nil })
	}()
	select {
	case err := <-done:
		if err == nil || ctx.Err() != nil {
			t.Fatalf("Follow = %v, want etcd's failure", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the relayed feed still waits for an unreachable etcd after 10s")
	}
}
