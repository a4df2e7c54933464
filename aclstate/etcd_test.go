package aclstate

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/meshlet/meshlet/internal/etcdembed"
)

// testMember is one embedded etcd member shared by the package's tests
// (each test works under its own key prefix); started by TestMain as
// meshstate's tests start theirs.
var testMember *etcdembed.Member

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "aclstate-etcd-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	testMember, err = startMember(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, "failed to start etcd member:", err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = testMember.Close()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// startMember starts a Dev member on loopback ports picked free.
func startMember(dir string) (*etcdembed.Member, error) {
	client, err := freeURL()
	if err != nil {
		return nil, err
	}
	peer, err := freeURL()
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return etcdembed.Start(ctx, etcdembed.Config{
		DataDir: dir + "/etcd", Name: "aclstate-test", ClientURL: client, PeerURL: peer,
		Logger: hclog.NewNullLogger(), Dev: true,
	})
}

// freeURL returns http://127.0.0.1:<port> for a port that was free a
// moment ago.
func freeURL() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		return "", err
	}
	return "http://" + addr, nil
}

// newClient is a network client of the test member, closed when the
// test ends.
func newClient(t testing.TB) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: testMember.ClientURLs(), DialTimeout: 5 * time.Second,
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
	return fmt.Sprintf("/test/%d/%s/", prefixSeq.Add(1), strings.ReplaceAll(t.Name(), "/", "_"))
}

// testNow is the clock of test stores.
var testNow = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// openTest opens a store on c under prefix with a fixed clock and opts'
// other fields; its logs are printed if the test fails.
func openTest(t testing.TB, c *clientv3.Client, prefix string, opts Options) *EtcdStore {
	t.Helper()
	b := &logBuffer{}
	t.Cleanup(func() {
		if logs := b.String(); t.Failed() && logs != "" {
			t.Logf("logs:\n%s", logs)
		}
	})
	opts.Prefix, opts.RequestTimeout = prefix, 5*time.Second
	opts.Logger = hclog.New(&hclog.LoggerOptions{Name: "test", Level: hclog.Debug, Output: b})
	if opts.Now == nil {
		opts.Now = func() time.Time { return testNow }
	}
	return Open(c, opts)
}

// newStore is a store under a fresh prefix.
func newStore(t testing.TB) *EtcdStore {
	t.Helper()
	return openTest(t, newClient(t), testPrefix(t), Options{})
}

// logBuffer collects a test's log lines; goroutines may write to it
// after the test ended, unlike t.Log.
type logBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *logBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *logBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func ctxT(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// put writes a raw value under the store's prefix, as a corrupting hand
// would.
func put(t testing.TB, s *EtcdStore, sub, val string) {
	t.Helper()
	if _, err := s.c.Put(ctxT(t, 5*time.Second), s.key(sub), val); err != nil {
		t.Fatal(err)
	}
}

func TestOpenDefaults(t *testing.T) {
	s := Open(newClient(t), Options{})
	if s.Prefix() != DefaultPrefix || s.opts.RequestTimeout != DefaultRequestTimeout || s.opts.Now == nil || s.log == nil {
		t.Fatalf("defaults not applied: %+v", s.opts)
	}
	if got := Open(newClient(t), Options{Prefix: "/x"}).Prefix(); got != "/x/" {
		t.Fatalf("prefix = %q, want /x/", got)
	}
}
