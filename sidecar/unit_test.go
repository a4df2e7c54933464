package sidecar

import (
	"context"
	"crypto/x509"
	"errors"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"github.com/hashicorp/go-hclog"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// scriptedChecker answers Check from a script: allow, deny, or fail.
type scriptedChecker struct {
	answer string
}

func (s *scriptedChecker) Check(context.Context, *authv3.CheckRequest, ...grpc.CallOption) (*authv3.CheckResponse, error) {
	switch s.answer {
	case "allow":
		return &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(codes.OK)}}, nil
	case "deny":
		return &authv3.CheckResponse{Status: &rpcstatus.Status{Code: int32(codes.PermissionDenied)}}, nil
	}
	return nil, status.Error(codes.Unavailable, "control plane away")
}

// The authorizer's decision table, including the fail-static fallback to the
// last decision for the same principals and failure_mode_allow.
func TestAuthorizerDecisions(t *testing.T) {
	steps := []struct {
		name      string
		answer    string
		allowMode bool
		want      bool
	}{
		{"error with no history fails closed", "error", false, false},
		{"error with failure_mode_allow allows", "error", true, true},
		{"allow", "allow", false, true},
		{"error after an allow reuses it", "error", false, true},
		{"deny", "deny", false, false},
		{"error after a deny reuses it", "error", false, false},
		{"deny wins over failure_mode_allow", "deny", true, false},
	}
	chk := &scriptedChecker{}
	a := newAuthorizer(chk, "", hclog.NewNullLogger())
	st := newAuthzStats(newStatsRegistry(), "t")
	c1, c2 := net.Pipe()
	defer c1.Close()
	defer c2.Close()
	for _, s := range steps {
		chk.answer = s.answer
		cfg := &authzConfig{statPrefix: "t", failureModeAllow: s.allowMode, timeout: time.Second}
		if got := a.authorize(context.Background(), cfg, st, c1, spiffeID("db")); got != s.want {
			t.Fatalf("%s: allowed = %v, want %v", s.name, got, s.want)
		}
	}
	if st.staleDecision.Load() != 2 || st.failureModeAllowed.Load() != 1 || st.errors.Load() != 4 {
		t.Fatalf("stats: stale %d, failure_mode_allowed %d, errors %d", st.staleDecision.Load(), st.failureModeAllowed.Load(), st.errors.Load())
	}
}

func TestVerifyPeer(t *testing.T) {
	ca, other := newTestCA(t, "root"), newTestCA(t, "other")
	good := ca.leaf(t, spiffeID("db"))
	impostor := ca.leaf(t, spiffeID("evil"))
	foreign := other.leaf(t, spiffeID("db"))
	s := &secretStore{}
	roots, err := decodeSecret(rootsSecret("roots", ca))
	if err != nil {
		t.Fatal(err)
	}
	s.replace(map[string]*secret{"roots": roots})
	exact := spiffeID("db")
	v := &validationSource{sds: "roots", sans: []sanMatcher{{kind: sanURI, m: stringMatcher{exact: &exact}}}}
	cases := []struct {
		name string
		leaf *testLeaf
		src  *validationSource
		want error
	}{
		{"trusted with the right SPIFFE ID", good, v, nil},
		{"trusted, wrong SPIFFE ID", impostor, v, ErrPeerSANMismatch},
		{"another CA", foreign, v, ErrPeerNotTrusted},
		{"roots secret not delivered yet", good, &validationSource{sds: "missing"}, ErrSecretMissing},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := s.verifyPeer(tc.src, []*x509.Certificate{tc.leaf.cert})
			if !errors.Is(err, tc.want) && !(tc.want == nil && err == nil) {
				t.Fatalf("verifyPeer = %v, want %v", err, tc.want)
			}
		})
	}
	// An untrusted chain's error keeps x509's cause; no chain at all has
	// its own error.
	var unknown x509.UnknownAuthorityError
	if err := s.verifyPeer(v, []*x509.Certificate{foreign.cert}); !errors.As(err, &unknown) {
		t.Fatalf("verifyPeer(foreign chain) = %v; want it to wrap x509.UnknownAuthorityError", err)
	}
	if err := s.verifyPeer(v, nil); !errors.Is(err, ErrNoPeerCertificate) {
		t.Fatalf("verifyPeer(no chain) = %v; want ErrNoPeerCertificate", err)
	}
}

func TestBackoffBounds(t *testing.T) {
	for attempt := 0; attempt < 20; attempt++ {
		d := reconnectDelay(attempt)
		if d <= 0 || d > backoffMax {
			t.Fatalf("reconnectDelay(%d) = %s, want within (0, %s]", attempt, d, backoffMax)
		}
	}
	if nackHold(1) != 0 {
		t.Fatal("the first NACK must not be held")
	}
	prev := time.Duration(0)
	for n := 2; n < 20; n++ {
		h := nackHold(n)
		if h < prev || h > nackHoldMax {
			t.Fatalf("nackHold(%d) = %s after %s", n, h, prev)
		}
		prev = h
	}
}

func TestConfigValidation(t *testing.T) {
	cases := []struct {
		name string
		cfg  Config
		ok   bool
	}{
		{"defaults", DefaultConfig("web-sidecar-proxy", "web", "127.0.0.1:8502"), true},
		{"unix socket", Config{ProxyID: "p", XDSAddr: "unix:///run/meshlet/xds.sock"}, true},
		{"no proxy id", Config{XDSAddr: "127.0.0.1:8502"}, false},
		{"no xds addr", Config{ProxyID: "p"}, false},
		{"bare host", Config{ProxyID: "p", XDSAddr: "localhost"}, false},
		{"empty unix path", Config{ProxyID: "p", XDSAddr: "unix://"}, false},
		{"bad admin bind", Config{ProxyID: "p", XDSAddr: "127.0.0.1:1", AdminBind: "19001"}, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p, err := New(tc.cfg)
			if tc.ok != (err == nil) {
				t.Fatalf("New error = %v, want ok=%v", err, tc.ok)
			}
			if err != nil {
				if !errors.Is(err, ErrInvalidConfig) {
					t.Fatalf("error %v is not ErrInvalidConfig", err)
				}
				return
			}
			if p.cfg.AdminBind == "" || p.cfg.DrainTimeout == 0 {
				t.Fatalf("defaults not applied: %+v", p.cfg)
			}
			if err := p.Close(); err != nil {
				t.Fatalf("Close of an unstarted proxy: %v", err)
			}
		})
	}
}

// An LDS set that cannot be bound is rejected and leaves no socket behind.
func TestListenerPrepareRejectsUnbindableSets(t *testing.T) {
	p, err := New(Config{ProxyID: "p", XDSAddr: "127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	_, takenPort := hostPort(taken.Addr().String())
	free := freePort(t)
	entries := func(ports ...int) map[string]*entry {
		out := map[string]*entry{}
		for i, port := range ports {
			cfg, err := decodeListener(upstreamListener("l"+strconv.Itoa(i), port, tcpProxyFilter(t, "x", "c")))
			if err != nil {
				t.Fatal(err)
			}
			// Two names for one address need distinct map keys.
			cfg.name = cfg.name + "#" + strconv.Itoa(i)
			out[cfg.name] = &entry{name: cfg.name, cfg: cfg}
		}
		return out
	}
	cases := []struct {
		name  string
		ports []int
		want  string
	}{
		{"address in use", []int{free, takenPort}, "failed to bind"},
		{"two listeners on one address", []int{free, free}, "both bind"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := p.listeners.prepare(entries(tc.ports...))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("prepare = %v, want %q", err, tc.want)
			}
			if n := len(p.listeners.sockets); n != 0 {
				t.Fatalf("%d sockets left bound after a rejected set", n)
			}
		})
	}
}
