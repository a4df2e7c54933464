package etcdembed

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"
)

func TestRestartKeepsData(t *testing.T) {
	cfg := memberConfig(t, "m1")
	lg, logs := testLogger(t)
	cfg.Logger = lg

	m := start(t, cfg)
	if !m.IsLeader() {
		t.Error("a lone member is not the leader")
	}
	if got := m.ClientURLs(); len(got) != 1 || got[0] != cfg.ClientURL {
		t.Errorf("ClientURLs = %v, want [%s]", got, cfg.ClientURL)
	}
	ctx := ctxT(t, 10*time.Second)
	if _, err := m.Client().Put(ctx, "/meshlet/k", "v1"); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if err := m.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}

	// The restarted member ignores a different initial cluster: it
	// restarts from its data dir.
	cfg.InitialCluster = "m1=" + cfg.PeerURL + ",ghost=http://127.0.0.1:1"
	m2 := start(t, cfg)
	resp, err := m2.Client().Get(ctx, "/meshlet/k")
	if err != nil {
		t.Fatalf("Get after restart: %v", err)
	}
	if len(resp.Kvs) != 1 || string(resp.Kvs[0].Value) != "v1" {
		t.Fatalf("Get after restart = %v, want v1", resp.Kvs)
	}
	if err := m2.Close(); err != nil {
		t.Fatalf("Close after restart: %v", err)
	}

	for _, line := range strings.Split(logs.String(), "\n") {
		if strings.Contains(line, "[INFO]") || strings.Contains(line, "[DEBUG]") || strings.Contains(line, "[TRACE]") {
			t.Errorf("logged below warn: %s", line)
		}
	}
	checkWALSegments(t, cfg.DataDir)
}

// checkWALSegments checks the WAL files are preallocated to
// WALSegmentBytes, not etcd's 64 MB.
func checkWALSegments(t *testing.T, dataDir string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dataDir, "member", "wal", "*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no WAL files in %s: %v", dataDir, err)
	}
	for _, f := range files {
		st, err := os.Stat(f)
		if err != nil {
			t.Fatal(err)
		}
		if st.Size() > WALSegmentBytes {
			t.Errorf("WAL file %s is %d bytes, want at most %d", f, st.Size(), WALSegmentBytes)
		}
	}
}

func TestStartOnHeldDirFailsFast(t *testing.T) {
	cfg := memberConfig(t, "m1")
	start(t, cfg)

	second := memberConfig(t, "m2")
	second.DataDir = cfg.DataDir
	begin := time.Now()
	_, err := Start(ctxT(t, 10*time.Second), second)
	if !errors.Is(err, ErrLocked) {
		t.Fatalf("second Start: err = %v, want ErrLocked", err)
	}
	if took := time.Since(begin); took > 2*time.Second {
		t.Errorf("second Start took %s", took)
	}
	if !strings.Contains(err.Error(), cfg.DataDir) {
		t.Errorf("error %q does not name the data dir", err)
	}
	checkOneLine(t, err)
}

func TestStartRejectsBadConfig(t *testing.T) {
	base := memberConfig(t, "m1")
	tests := map[string]func(*Config){
		"no data dir":       func(c *Config) { c.DataDir = "" },
		"no name":           func(c *Config) { c.Name = "" },
		"bad state":         func(c *Config) { c.ClusterState = "joining" },
		"https without tls": func(c *Config) { c.ClientURL = strings.Replace(c.ClientURL, "http:", "https:", 1) },
		"tls on http url":   func(c *Config) { c.ClientTLS = &TLSFiles{CAFile: "ca", CertFile: "c", KeyFile: "k"} },
		"incomplete tls": func(c *Config) {
			c.PeerURL = strings.Replace(c.PeerURL, "http:", "https:", 1)
			c.PeerTLS = &TLSFiles{CertFile: "c", KeyFile: "k"}
		},
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			cfg := base
			mutate(&cfg)
			if _, err := Start(context.Background(), cfg); !errors.Is(err, ErrInvalidConfig) {
				t.Fatalf("Start: err = %v, want ErrInvalidConfig", err)
			}
		})
	}
}

func TestGatewayIsOff(t *testing.T) {
	m := start(t, memberConfig(t, "m1"))
	// {"key": "gw", "value": "written"} in the gateway's base64 JSON.
	body := `{"key":"Z3c=","value":"d3JpdHRlbg=="}`
	resp, err := http.Post(m.ClientURLs()[0]+"/v3/kv/put", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode == http.StatusOK {
		t.Errorf("POST /v3/kv/put answered 200")
	}
	got, err := m.Client().Get(ctxT(t, 5*time.Second), "gw")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	if len(got.Kvs) != 0 {
		t.Fatalf("the gateway wrote %q", got.Kvs[0].Value)
	}
}

// TestInProcessClientLeasesAndWatches checks the in-process client carries
// what the server builds on: sessions (leases with keep-alives), elections
// and watches. Closing the member with the session open must not hang.
func TestInProcessClientLeasesAndWatches(t *testing.T) {
	m := start(t, memberConfig(t, "m1"))
	ctx := ctxT(t, 10*time.Second)
	c := m.Client()

	wch := c.Watch(ctx, "/meshlet/w")
	sess, err := concurrency.NewSession(c, concurrency.WithTTL(1))
	if err != nil {
		t.Fatalf("NewSession: %v", err)
	}
	el := concurrency.NewElection(sess, "/meshlet/leader")
	if err := el.Campaign(ctx, "me"); err != nil {
		t.Fatalf("Campaign: %v", err)
	}
	if _, err := c.Put(ctx, "/meshlet/w", "x"); err != nil {
		t.Fatalf("Put: %v", err)
	}
	select {
	case wr := <-wch:
		if len(wr.Events) != 1 || string(wr.Events[0].Kv.Value) != "x" {
			t.Fatalf("watch = %+v", wr.Events)
		}
	case <-ctx.Done():
		t.Fatal("no watch event")
	}
	time.Sleep(1500 * time.Millisecond) // past the TTL: keep-alives must hold the lease
	leader, err := el.Leader(ctx)
	if err != nil || string(leader.Kvs[0].Value) != "me" {
		t.Fatalf("Leader after the TTL = %v, %v", leader, err)
	}
	begin := time.Now()
	if err := m.Close(); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if took := time.Since(begin); took > 3*time.Second {
		t.Errorf("Close with an open session and watch took %s", took)
	}
}

// TestStartFailureCleansUp checks a Start that fails, at once or after
// waiting for a quorum that never forms, releases the data dir and leaves
// no goroutines behind.
func TestStartFailureCleansUp(t *testing.T) {
	taken := start(t, memberConfig(t, "taken"))
	before := runtime.NumGoroutine()

	cfg := memberConfig(t, "m1")
	clash := cfg
	clash.ClientURL = taken.ClientURLs()[0]
	if _, err := Start(ctxT(t, 10*time.Second), clash); err == nil || errors.Is(err, ErrLocked) {
		t.Fatalf("Start on a used port: err = %v", err)
	}

	// A new two-member cluster whose other member never starts.
	alone := cfg
	alone.InitialCluster = "m1=" + cfg.PeerURL + ",m2=" + memberConfig(t, "m2").PeerURL
	alone.StartTimeout = time.Second
	begin := time.Now()
	_, err := Start(context.Background(), alone)
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Start without quorum: err = %v, want a deadline error", err)
	}
	if took := time.Since(begin); took > 5*time.Second {
		t.Errorf("Start without quorum took %s with a 1s timeout", took)
	}
	checkOneLine(t, err)
	waitGoroutines(t, before)

	// The dir is free again (a fresh dir: the failed one holds a member of
	// the two-member cluster).
	cfg.DataDir = filepath.Join(t.TempDir(), "etcd")
	start(t, cfg)
}

// waitGoroutines waits for the goroutine count to fall back to n (a few
// more are tolerated: timers and connections of the running member).
func waitGoroutines(t *testing.T, n int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for runtime.NumGoroutine() > n+3 {
		if time.Now().After(deadline) {
			buf := make([]byte, 1<<20)
			t.Fatalf("%d goroutines, %d before:\n%s", runtime.NumGoroutine(), n, buf[:runtime.Stack(buf, true)])
		}
		time.Sleep(50 * time.Millisecond)
	}
}
