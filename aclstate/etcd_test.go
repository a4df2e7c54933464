package aclstate

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/meshlet/meshlet/internal/etcdembed"
	"github.com/meshlet/meshlet/internal/etcdembed/etcdtest"
)

// testMember is one embedded etcd member shared by the package's tests
// (each test works under its own key prefix); started by TestMain.
var testMember *etcdembed.Member

func TestMain(m *testing.M) { etcdtest.Main(m, "aclstate", &testMember, nil) }

// newClient is a network client of the test member, closed when the
// test ends.
func newClient(t testing.TB) *clientv3.Client { return etcdtest.Client(t, testMember) }

// testPrefix is a key prefix no other test uses.
func testPrefix(t testing.TB) string { return etcdtest.Prefix(t) }

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

type logBuffer = etcdtest.LogBuffer

func ctxT(t testing.TB, d time.Duration) context.Context { return etcdtest.Ctx(t, d) }

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
