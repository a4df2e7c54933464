package state

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// testMember is the one etcd member every test of the package shares (each
// test works under its own key prefix); started by TestMain.
var testMember struct {
	etcd     *embed.Etcd
	endpoint string
}

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "state-etcd-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	e, err := startMember(dir, func(cfg *embed.Config) {
		cfg.MaxTxnOps = 1 << 16
		cfg.MaxRequestBytes = 32 << 20
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "failed to start etcd member:", err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	testMember.etcd = e
	testMember.endpoint = e.Clients[0].Addr().String()
	code := m.Run()
	e.Close()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// freeURL returns http://127.0.0.1:<port> for a port that was free a moment
// ago.
func freeURL() (url.URL, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return url.URL{}, err
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		return url.URL{}, err
	}
	return url.URL{Scheme: "http", Host: addr}, nil
}

// startMember starts a single-member cluster on 127.0.0.1 with fast
// elections, no gRPC gateway and no logs; tune changes the config.
func startMember(dir string, tune func(*embed.Config)) (*embed.Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Name = "state-test"
	cfg.Dir = dir
	peer, err := freeURL()
	if err != nil {
		return nil, err
	}
	client, err := freeURL()
	if err != nil {
		return nil, err
	}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.EnableGRPCGateway = false
	cfg.TickMs, cfg.ElectionMs = 10, 100
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	if tune != nil {
		tune(cfg)
	}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, err
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case <-time.After(30 * time.Second):
		e.Close()
		return nil, fmt.Errorf("etcd member not ready after 30s")
	}
}

// newTestClient returns a client of the shared member, closed at the end of
// the test (after the stores using it, whose Cleanups run first).
func newTestClient(t testing.TB) *clientv3.Client { return newClient(t, testMember.endpoint) }

func newClient(t testing.TB, endpoint string) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second,
		Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var prefixSeq atomic.Int64

// testPrefix is a key prefix no other test uses.
func testPrefix(t testing.TB) string {
	return fmt.Sprintf("/test/%d/%s/", prefixSeq.Add(1), t.Name())
}
