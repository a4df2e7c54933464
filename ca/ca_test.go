package ca

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/meshlet/meshlet/internal/testutil"
)

func newTestManager(t *testing.T, cfg Config) *Manager {
	t.Helper()
	m, err := New(cfg, hclog.NewNullLogger(), nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	t.Cleanup(func() { _ = m.Close() })
	return m
}

func mustLeaf(t *testing.T, m *Manager, service string) *Leaf {
	t.Helper()
	l, err := m.Leaf(context.Background(), service)
	if err != nil {
		t.Fatalf("Leaf(%s): %v", service, err)
	}
	return l
}

func parseLeafChain(t *testing.T, l *Leaf) []*x509.Certificate {
	t.Helper()
	tc, err := l.TLSCertificate()
	if err != nil {
		t.Fatalf("TLSCertificate: %v", err)
	}
	var out []*x509.Certificate
	for _, raw := range tc.Certificate {
		c, err := x509.ParseCertificate(raw)
		if err != nil {
			t.Fatalf("parse: %v", err)
		}
		out = append(out, c)
	}
	return out
}

func TestPersistAndReload(t *testing.T) {
	dir := t.TempDir()
	m1, err := New(Config{Dir: dir}, hclog.NewNullLogger(), nil)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	td, roots := m1.TrustDomain(), m1.Roots()
	if !strings.HasSuffix(td, ".meshlet") || len(roots.Roots) != 1 || !roots.Roots[0].Active {
		t.Fatalf("unexpected initial CA: td=%q roots=%+v", td, roots)
	}
	_ = m1.Close()

	err = filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if perm := info.Mode().Perm(); perm != 0o600 {
			t.Errorf("%s has mode %o, want 600", path, perm)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	keys, _ := filepath.Glob(filepath.Join(dir, "root-*.key"))
	if len(keys) != 1 {
		t.Fatalf("want 1 root key file, got %v", keys)
	}

	m2 := newTestManager(t, Config{Dir: dir})
	if m2.TrustDomain() != td {
		t.Errorf("trust domain changed across restart: %s != %s", m2.TrustDomain(), td)
	}
	r2 := m2.Roots()
	if r2.ActiveRootID != roots.ActiveRootID || r2.Roots[0].RootCertPEM != roots.Roots[0].RootCertPEM {
		t.Errorf("root changed across restart")
	}

	if _, err := New(Config{Dir: dir, ClusterID: "0b6f2c8e-0000-4000-8000-000000000001"}, nil, nil); err == nil {
		t.Errorf("expected an error for a cluster ID that differs from the persisted one")
	}
}

func TestLoadRejectsCorruptState(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, stateFileName), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := New(Config{Dir: dir}, nil, nil); !errors.Is(err, ErrStateCorrupt) {
		t.Fatalf("want ErrStateCorrupt, got %v", err)
	}
}

func TestConfigValidation(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
	}{
		{"leaf ttl too short", Config{LeafTTL: time.Millisecond}},
		{"root ttl below leaf ttl", Config{LeafTTL: time.Hour, RootTTL: time.Minute}},
		{"negative sign rate", Config{SignRate: -1}},
		{"bad cluster id", Config{ClusterID: "not-a-uuid"}},
		{"bad datacenter", Config{Datacenter: "dc/1"}},
		{"negative overlap", Config{RootOverlap: -time.Second}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if _, err := New(tc.cfg, nil, nil); err == nil {
				t.Fatalf("expected an error")
			}
		})
	}
}

func TestParseSpiffeID(t *testing.T) {
	cases := []struct {
		in   string
		want SpiffeID
		ok   bool
	}{
		{"spiffe://abc.meshlet/ns/default/dc/dc1/svc/web", SpiffeID{"abc.meshlet", "default", "dc1", "web"}, true},
		{"spiffe://ABC.meshlet/ns/default/dc/dc1/svc/api_v2", SpiffeID{"abc.meshlet", "default", "dc1", "api_v2"}, true},
		{"https://abc.meshlet/ns/default/dc/dc1/svc/web", SpiffeID{}, false},
		{"spiffe:///ns/default/dc/dc1/svc/web", SpiffeID{}, false},
		{"spiffe://abc.meshlet/ns/default/dc/dc1/svc/", SpiffeID{}, false},
		{"spiffe://abc.meshlet/ns/default/dc/dc1/svc/web/extra", SpiffeID{}, false},
		{"spiffe://abc.meshlet/agent/client/dc/dc1/id/x", SpiffeID{}, false},
		{"spiffe://abc.meshlet:8443/ns/default/dc/dc1/svc/web", SpiffeID{}, false},
		{"spiffe://abc.meshlet/ns/default/dc/dc1/svc/web?x=1", SpiffeID{}, false},
		{"spiffe://abc.meshlet/ns/default/dc/dc1/svc/we*b", SpiffeID{}, false},
		{"::::", SpiffeID{}, false},
		{"", SpiffeID{}, false},
	}
	for _, tc := range cases {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseSpiffeID(tc.in)
			if tc.ok != (err == nil) {
				t.Fatalf("ParseSpiffeID(%q) err = %v, want ok=%v", tc.in, err, tc.ok)
			}
			if !tc.ok && !errors.Is(err, ErrInvalidSpiffeID) {
				t.Fatalf("want ErrInvalidSpiffeID, got %v", err)
			}
			if got != tc.want {
				t.Fatalf("got %+v, want %+v", got, tc.want)
			}
			if tc.ok && !strings.EqualFold(got.URI(), tc.in) {
				t.Fatalf("URI() = %s, want %s", got.URI(), tc.in)
			}
		})
	}
}

func TestLeafVerifiesAgainstRoots(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := New(Config{Datacenter: "east"}, hclog.NewNullLogger(), reg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })

	l := mustLeaf(t, m, "web")
	chain := parseLeafChain(t, l)
	if len(chain) != 1 {
		t.Fatalf("want a single certificate before any rotation, got %d", len(chain))
	}
	pool, err := m.Roots().CertPool()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chain[0].Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}); err != nil {
		t.Fatalf("leaf does not verify against roots: %v", err)
	}
	want := "spiffe://" + m.TrustDomain() + "/ns/default/dc/east/svc/web"
	if l.SpiffeID != want || m.SpiffeID("web") != want || len(chain[0].URIs) != 1 || chain[0].URIs[0].String() != want {
		t.Fatalf("leaf identity = %s / %v, want %s", l.SpiffeID, chain[0].URIs, want)
	}
	if got := chain[0].DNSNames; len(got) != 1 || got[0] != "web.svc.default."+m.TrustDomain() {
		t.Errorf("DNS SANs = %v", got)
	}
	if svc, err := m.VerifyPeer([][]byte{chain[0].Raw}); err != nil || svc != "web" {
		t.Errorf("VerifyPeer = %q, %v", svc, err)
	}

	again := mustLeaf(t, m, "web")
	if again.SerialNumber != l.SerialNumber {
		t.Errorf("second Leaf call issued a new certificate; want the cached one")
	}
	if n := counterValue(t, m.metrics.issued); n != 1 {
		t.Errorf("issued metric = %v, want 1", n)
	}
	b, _ := json.Marshal(m.Roots())
	if strings.Contains(string(b), "PRIVATE KEY") {
		t.Fatalf("Roots() leaks key material: %s", b)
	}
	if _, err := m.Leaf(context.Background(), "bad/name"); !errors.Is(err, ErrInvalidService) {
		t.Errorf("want ErrInvalidService, got %v", err)
	}
}

func TestRenewalTime(t *testing.T) {
	issued := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	expires := issued.Add(100 * time.Hour)
	cases := []struct {
		r    float64
		want time.Duration
	}{
		{0, 60 * time.Hour},
		{0.5, 75 * time.Hour},
		{0.999999, 89*time.Hour + 59*time.Minute + 58*time.Second},
		{-1, 60 * time.Hour},
		{1, 60 * time.Hour},
	}
	for _, tc := range cases {
		got := renewalTime(issued, expires, tc.r).Sub(issued)
		if got < tc.want || got > tc.want+2*time.Second {
			t.Errorf("renewalTime(r=%v) = %s, want ~%s", tc.r, got, tc.want)
		}
	}
	m := newTestManager(t, Config{})
	for i := 0; i < 1000; i++ {
		d := renewalTime(issued, expires, m.randFloat()).Sub(issued)
		if d < 60*time.Hour || d >= 90*time.Hour {
			t.Fatalf("renewal point %s outside [60%%, 90%%)", d)
		}
	}
}

func TestBackgroundRenewal(t *testing.T) {
	m := newTestManager(t, Config{LeafTTL: 2 * time.Second})
	m.randFloat = func() float64 { return 0 } // renew at 60%: ~1.2s
	var renewed atomic.Int32
	cancel := m.Subscribe(func(ev Event) {
		if ev.Kind == EventLeafRenewed && ev.Service == "web" {
			renewed.Add(1)
		}
	})
	defer cancel()
	first := mustLeaf(t, m, "web")
	testutil.WaitFor(t, 20*time.Second, "background renewal", func() bool { return renewed.Load() >= 2 })
	second := mustLeaf(t, m, "web")
	if second.SerialNumber == first.SerialNumber || second.ModifyIndex <= first.ModifyIndex {
		t.Fatalf("leaf not renewed: %s -> %s", first.SerialNumber, second.SerialNumber)
	}
}

type countingLimiter struct {
	calls atomic.Int32
	err   error
}

func (c *countingLimiter) Wait(context.Context) error {
	c.calls.Add(1)
	return c.err
}

func TestLimiterConsulted(t *testing.T) {
	lim := &countingLimiter{}
	m := newTestManager(t, Config{Limiter: lim})
	for _, svc := range []string{"a", "b", "c", "a"} {
		mustLeaf(t, m, svc)
	}
	if n := lim.calls.Load(); n != 3 {
		t.Fatalf("limiter consulted %d times, want 3 (one per signing)", n)
	}

	lim.err = errors.New("slow down")
	if _, err := m.Leaf(context.Background(), "d"); err == nil || !errors.Is(err, lim.err) {
		t.Fatalf("want the limiter's error, got %v", err)
	}
	lim.err = nil
	if l := mustLeaf(t, m, "d"); l.Service != "d" {
		t.Fatalf("got leaf for %s", l.Service)
	}
}

func TestTokenBucketReserve(t *testing.T) {
	tb := NewTokenBucket(10, 2)
	start := time.Unix(1000, 0)
	steps := []struct {
		at   time.Duration
		want time.Duration
	}{
		{0, 0}, {0, 0}, // burst of 2
		{0, 100 * time.Millisecond},                       // third waits one interval
		{0, 200 * time.Millisecond},                       // fourth two
		{time.Second, 0},                                  // refilled (capped at burst)
		{time.Second, 0},                                  //
		{time.Second, 100 * time.Millisecond},             //
		{1050 * time.Millisecond, 150 * time.Millisecond}, // half a token refilled, 1.5 owed
	}
	for i, s := range steps {
		got := tb.reserve(start.Add(s.at))
		if diff := got - s.want; diff < -time.Millisecond || diff > time.Millisecond {
			t.Errorf("step %d: wait %s, want %s", i, got, s.want)
		}
	}
	slow := NewTokenBucket(0.001, 1)
	if err := slow.Wait(context.Background()); err != nil {
		t.Fatalf("first Wait on a full bucket: %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := slow.Wait(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("Wait on an empty bucket with a cancelled context = %v", err)
	}
}

func TestVerifyPeerRejects(t *testing.T) {
	m := newTestManager(t, Config{})
	foreign := newTestManager(t, Config{})
	fl := parseLeafChain(t, mustLeaf(t, foreign, "web"))
	if _, err := m.VerifyPeer([][]byte{fl[0].Raw}); !errors.Is(err, ErrUntrusted) {
		t.Errorf("foreign CA leaf: want ErrUntrusted, got %v", err)
	}
	if _, err := m.VerifyPeer(nil); !errors.Is(err, ErrUntrusted) {
		t.Errorf("no certificate: want ErrUntrusted, got %v", err)
	}
	if _, err := m.VerifyPeer([][]byte{[]byte("garbage")}); !errors.Is(err, ErrUntrusted) {
		t.Errorf("garbage: want ErrUntrusted, got %v", err)
	}
	// A certificate signed by our root but naming another trust domain.
	forged := forgeLeaf(t, m, "spiffe://other.meshlet/ns/default/dc/dc1/svc/web")
	if _, err := m.VerifyPeer([][]byte{forged}); !errors.Is(err, ErrForeignTrustDomain) {
		t.Errorf("foreign trust domain: want ErrForeignTrustDomain, got %v", err)
	}
	forged = forgeLeaf(t, m, "spiffe://"+m.TrustDomain()+"/agent/x")
	if _, err := m.VerifyPeer([][]byte{forged}); !errors.Is(err, ErrInvalidSpiffeID) {
		t.Errorf("non-service ID: want ErrInvalidSpiffeID, got %v", err)
	}
}

func TestCloseStopsEverything(t *testing.T) {
	m, err := New(Config{}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustLeaf(t, m, "web")
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); _ = m.Close() }()
	wg.Wait()
	if _, err := m.Leaf(context.Background(), "web"); !errors.Is(err, ErrClosed) {
		t.Errorf("Leaf after Close = %v, want ErrClosed", err)
	}
	if err := m.Rotate(context.Background()); !errors.Is(err, ErrClosed) {
		t.Errorf("Rotate after Close = %v, want ErrClosed", err)
	}
	if err := m.Close(); err != nil {
		t.Errorf("second Close = %v", err)
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var d dto.Metric
	if err := c.Write(&d); err != nil {
		t.Fatal(err)
	}
	return d.GetCounter().GetValue()
}

// TestRenewalAfterSuspend: the renewal timers run on the monotonic
// clock, which stands still while the host is suspended (a laptop, a
// paused VM); on resume the wall clock is past the renewal point (or past
// the leaf's end) while the timer still waits. The renewal loop re-checks
// the wall clock at least every maxRenewSleep, so the leaf is renewed
// soon after the resume, not hours later.
func TestRenewalAfterSuspend(t *testing.T) {
	m := newTestManager(t, Config{LeafTTL: time.Hour})
	m.randFloat = func() float64 { return 0 } // renew at 36 min
	m.maxRenewSleep = 50 * time.Millisecond
	var slept atomic.Int64
	m.now = func() time.Time { return time.Now().Round(0).Add(time.Duration(slept.Load())) }
	first := mustLeaf(t, m, "web")
	time.Sleep(100 * time.Millisecond) // the renewal loop is waiting
	slept.Store(int64(50 * time.Minute))
	testutil.WaitFor(t, 5*time.Second, "renewal after the resume", func() bool {
		l := cachedLeaf(m, "web")
		return l != nil && l.SerialNumber != first.SerialNumber
	})
}
