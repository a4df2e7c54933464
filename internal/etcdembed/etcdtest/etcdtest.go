// Package etcdtest runs one embedded etcd member for a package's tests:
// TestMain starts it (Main), each test talks to it through its own client
// (Client) under a key prefix no other test uses (Prefix).
package etcdtest

import (
	"context"
	"fmt"
	"net"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/meshlet/meshlet/internal/etcdembed"
	"github.com/meshlet/meshlet/internal/testutil"
)

// Main starts a Dev member named name on loopback ports picked free (tune,
// when set, edits its configuration first), stores it in *member, runs
// the tests, stops the member and exits with the tests' code.
func Main(m *testing.M, name string, member **etcdembed.Member, tune func(*etcdembed.Config)) {
	dir, err := os.MkdirTemp("", name+"-etcd-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	*member, err = start(dir, name, tune)
	if err != nil {
		fmt.Fprintln(os.Stderr, "failed to start etcd member:", err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = (*member).Close()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

func start(dir, name string, tune func(*etcdembed.Config)) (*etcdembed.Member, error) {
	client, err := FreeURL()
	if err != nil {
		return nil, err
	}
	peer, err := FreeURL()
	if err != nil {
		return nil, err
	}
	cfg := etcdembed.Config{DataDir: dir + "/etcd", Name: name + "-test", ClientURL: client, PeerURL: peer,
		Logger: hclog.NewNullLogger(), Dev: true}
	if tune != nil {
		tune(&cfg)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return etcdembed.Start(ctx, cfg)
}

// FreeURL returns http://127.0.0.1:<port> for a port that was free a
// moment ago.
func FreeURL() (string, error) {
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

// Client is a network client of member, closed when the test ends.
func Client(t testing.TB, member *etcdembed.Member) *clientv3.Client {
	t.Helper()
	c, err := clientv3.New(clientv3.Config{Endpoints: member.ClientURLs(), DialTimeout: 5 * time.Second,
		Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

var prefixSeq atomic.Int64

// Prefix is a key prefix no other test uses.
func Prefix(t testing.TB) string {
	return fmt.Sprintf("/test/%d/%s/", prefixSeq.Add(1), strings.ReplaceAll(t.Name(), "/", "_"))
}

// LogBuffer collects a test's log lines; goroutines may write to it after
// the test ended, unlike t.Log.
type LogBuffer = testutil.SyncBuffer

// Ctx is a context that ends after d or with the test.
func Ctx(t testing.TB, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}
