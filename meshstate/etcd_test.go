package meshstate

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

// TestMain starts the member with automatic compaction off: tests compact
// by hand.
func TestMain(m *testing.M) {
	etcdtest.Main(m, "meshstate", &testMember, func(c *etcdembed.Config) { c.AutoCompactionRetention = "0" })
}

// newClient is a network client of the test member, closed when the
// test ends.
func newClient(t testing.TB) *clientv3.Client { return etcdtest.Client(t, testMember) }

// testPrefix is a key prefix no other test uses.
func testPrefix(t testing.TB) string { return etcdtest.Prefix(t) }

// testNow is the clock of test stores.
var testNow = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

// openTest opens a store on c under prefix with a fixed clock; its logs
// are printed if the test fails.
func openTest(t testing.TB, c *clientv3.Client, prefix string) *Store {
	t.Helper()
	b := &logBuffer{}
	t.Cleanup(func() {
		if logs := b.String(); t.Failed() && logs != "" {
			t.Logf("logs:\n%s", logs)
		}
	})
	lg := hclog.New(&hclog.LoggerOptions{Name: "test", Level: hclog.Debug, Output: b})
	return Open(c, Options{Prefix: prefix, RequestTimeout: 5 * time.Second, Logger: lg,
		Now: func() time.Time { return testNow }})
}

type logBuffer = etcdtest.LogBuffer

func ctxT(t testing.TB, d time.Duration) context.Context { return etcdtest.Ctx(t, d) }

// currentRev is the member's current revision.
func currentRev(t testing.TB, c *clientv3.Client) int64 {
	t.Helper()
	resp, err := c.Get(ctxT(t, 5*time.Second), "rev", clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Header.Revision
}

// countKeys counts the keys under prefix + sub.
func countKeys(t testing.TB, c *clientv3.Client, prefix, sub string) int {
	t.Helper()
	resp, err := c.Get(ctxT(t, 5*time.Second), prefix+sub, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return int(resp.Count)
}

func TestOpenDefaults(t *testing.T) {
	s := Open(newClient(t), Options{})
	if s.Prefix() != DefaultPrefix || s.timeout != DefaultRequestTimeout || s.now == nil || s.logger == nil {
		t.Fatalf("defaults not applied: %+v", s)
	}
	if got := Open(newClient(t), Options{Prefix: "/x"}).Prefix(); got != "/x/" {
		t.Fatalf("prefix = %q, want /x/", got)
	}
}
