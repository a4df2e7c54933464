package agent

import (
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/rpc"
)

// A follower's API writes go to the leader through rpc.Forwarder: marked
// forwarded, with X-Forwarded-For, the leader's answer relayed as it is;
// reads, forwarded calls, the leader's own calls and calls without a
// known leader are served locally; an unreachable leader is a 503 with
// the no-leader code (a client tries again), not an empty 502.
func TestLeaderForwarding(t *testing.T) {
	var mu sync.Mutex
	var seen []*http.Request
	var bodies []string
	leaderSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		seen, bodies = append(seen, r), append(bodies, string(b))
		mu.Unlock()
		w.Header().Set("X-Answered-By", "leader")
		w.WriteHeader(http.StatusCreated)
		_, _ = io.WriteString(w, `{"EvalID":"e1"}`)
	}))
	t.Cleanup(leaderSrv.Close)
	leaderAddr := leaderSrv.Listener.Addr().String()

	dead, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadAddr := dead.Addr().String()
	_ = dead.Close()

	fwd, err := rpc.NewForwarder(nil, hclog.NewNullLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fwd.Close)
	var leaderMu sync.Mutex
	isLeader, addr := false, leaderAddr
	leader := func() (bool, string) {
		leaderMu.Lock()
		defer leaderMu.Unlock()
		return isLeader, addr
	}
	setLeader := func(l bool, a string) {
		leaderMu.Lock()
		isLeader, addr = l, a
		leaderMu.Unlock()
	}
	local := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Answered-By", "local")
		w.WriteHeader(http.StatusOK)
	})
	follower := httptest.NewServer(leaderForwarding(local, fwd, leader, func() string { return "127.0.0.1:1" }))
	t.Cleanup(follower.Close)

	send := func(method, path, body string, hdr map[string]string) *http.Response {
		t.Helper()
		req, err := http.NewRequest(method, follower.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = resp.Body.Close() })
		return resp
	}

	resp := send(http.MethodPut, "/v1/jobs", `{"Job":{"ID":"web"}}`, nil)
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusCreated || resp.Header.Get("X-Answered-By") != "leader" || string(b) != `{"EvalID":"e1"}` {
		t.Fatalf("forwarded write: %s %q from %q", resp.Status, b, resp.Header.Get("X-Answered-By"))
	}
	mu.Lock()
	if len(seen) != 1 || seen[0].Header.Get(rpc.HeaderForwarded) != "1" || seen[0].Header.Get("X-Forwarded-For") != "127.0.0.1" ||
		seen[0].URL.Path != "/v1/jobs" || bodies[0] != `{"Job":{"ID":"web"}}` {
		t.Fatalf("the leader saw %d requests: %+v, bodies %q", len(seen), seen, bodies)
	}
	mu.Unlock()

	for _, tc := range []struct {
		name, method, path string
		hdr                map[string]string
		leader             bool
		addr               string
	}{
		{"a read", http.MethodGet, "/v1/jobs", nil, false, leaderAddr},
		{"a forwarded write", http.MethodPut, "/v1/jobs", map[string]string{rpc.HeaderForwarded: "1"}, false, leaderAddr},
		{"an agent call", http.MethodPut, "/v1/agent/join", nil, false, leaderAddr},
		{"a write on the leader", http.MethodPut, "/v1/jobs", nil, true, ""},
		{"a write without a known leader", http.MethodPut, "/v1/jobs", nil, false, ""},
		{"a write when the leader is this server", http.MethodPut, "/v1/jobs", nil, false, "127.0.0.1:1"},
	} {
		setLeader(tc.leader, tc.addr)
		if resp := send(tc.method, tc.path, "", tc.hdr); resp.Header.Get("X-Answered-By") != "local" {
			t.Errorf("%s: answered by %q (%s), want local", tc.name, resp.Header.Get("X-Answered-By"), resp.Status)
		}
	}
	mu.Lock()
	if len(seen) != 1 {
		t.Errorf("the leader saw %d requests, want 1", len(seen))
	}
	mu.Unlock()

	setLeader(false, deadAddr)
	resp = send(http.MethodPut, "/v1/jobs", "{}", nil)
	b, _ = io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("X-Meshlet-Error") != "no_leader" || !strings.Contains(string(b), deadAddr) {
		t.Fatalf("unreachable leader: %s %q (code %q), want 503 no_leader naming %s", resp.Status, b, resp.Header.Get("X-Meshlet-Error"), deadAddr)
	}
}
