package checks

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"github.com/meshlet/meshlet/internal/netnsdial"
	"math/big"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
)

// hostPort splits a 127.0.0.1 listener address into a check's target.
func hostPort(t *testing.T, addr string) (string, int) {
	t.Helper()
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return h, port
}

// runProbe runs d once from the host with its timeout.
func runProbe(t *testing.T, d Definition, exec Execer) (Status, string) {
	t.Helper()
	p, err := newProbe(d, netnsdial.New("").DialContext, exec)
	if err != nil {
		t.Fatalf("newProbe: %v", err)
	}
	defer p.close()
	ctx, cancel := context.WithTimeout(context.Background(), d.timeout())
	defer cancel()
	return p.run(ctx)
}

// startRunner starts a Runner that is stopped when the test ends.
func startRunner(t *testing.T, cfg Config, defs ...Definition) *Runner {
	t.Helper()
	if cfg.Logger == nil {
		cfg.Logger = hclog.New(&hclog.LoggerOptions{Name: t.Name(), Level: hclog.Debug, Output: tWriter{t}})
	}
	r := New(cfg)
	r.Start(defs)
	t.Cleanup(r.Stop)
	return r
}

type tWriter struct{ t *testing.T }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(string(p))
	return len(p), nil
}

// result returns check id's current result.
func result(t *testing.T, r *Runner, id string) Result {
	t.Helper()
	for _, res := range r.Results() {
		if res.CheckID == id {
			return res
		}
	}
	t.Fatalf("no result for check %q", id)
	return Result{}
}

// waitFor polls until cond holds for check id's result, or fails.
func waitFor(t *testing.T, r *Runner, id string, what string, cond func(Result) bool) Result {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		res := result(t, r, id)
		if cond(res) {
			return res
		}
		if time.Now().After(deadline) {
			t.Fatalf("check %q: timed out waiting for %s; last result %+v", id, what, res)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fakeExec answers script checks from a function and counts calls.
type fakeExec struct {
	mu    sync.Mutex
	calls [][]string
	tasks []string
	fn    func(ctx context.Context, n int) ([]byte, int, error)
}

func (f *fakeExec) Exec(ctx context.Context, task string, cmd []string) ([]byte, int, error) {
	f.mu.Lock()
	f.calls = append(f.calls, cmd)
	f.tasks = append(f.tasks, task)
	n := len(f.calls)
	f.mu.Unlock()
	return f.fn(ctx, n)
}

func (f *fakeExec) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.calls)
}

// restartCall is one call to fakeRestarter.
type restartCall struct {
	task, reason string
	at           time.Time
	execs        int // script runs before the restart
}

type fakeRestarter struct {
	mu    sync.Mutex
	calls []restartCall
	exec  *fakeExec
	// fail is how many of the first calls fail.
	fail int
	// startedAt and stopped are what Started reports for every task
	// (zero: started long ago, running).
	startedAt time.Time
	stopped   bool
}

func (f *fakeRestarter) Started(string) (time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.startedAt, !f.stopped
}

// setTask sets what Started reports.
func (f *fakeRestarter) setTask(startedAt time.Time, running bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.startedAt, f.stopped = startedAt, !running
}

func (f *fakeRestarter) Restart(_ context.Context, task, reason string) error {
	n := 0
	if f.exec != nil {
		n = f.exec.count()
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, restartCall{task: task, reason: reason, at: time.Now(), execs: n})
	if len(f.calls) <= f.fail {
		return errors.New("restart failed")
	}
	return nil
}

func (f *fakeRestarter) get() []restartCall {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]restartCall(nil), f.calls...)
}

// changes records OnChange calls.
type changes struct {
	mu  sync.Mutex
	got []Result
}

func (c *changes) add(r Result) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got = append(c.got, r)
}

func (c *changes) get() []Result {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]Result(nil), c.got...)
}

// selfSigned returns a certificate for 127.0.0.1 signed by itself.
func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: "checks-test"},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}
