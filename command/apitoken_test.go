package command

import (
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
)

// tokenRecorder answers any request with an empty list (an allowed
// intention check) and Nomad's and Consul's headers, and records the
// token headers of the last request.
type tokenRecorder struct {
	mu            sync.Mutex
	nomad, consul string
	requests      int
}

func newTokenRecorder(t *testing.T) (*tokenRecorder, string) {
	t.Helper()
	rec := &tokenRecorder{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.mu.Lock()
		rec.nomad, rec.consul = r.Header.Get(nomadTokenHeader), r.Header.Get(consulTokenHeader)
		rec.requests++
		rec.mu.Unlock()
		for k, v := range map[string]string{"X-Nomad-Index": "1", "X-Nomad-LastContact": "0", "X-Consul-Index": "1", "X-Consul-LastContact": "0"} {
			w.Header().Set(k, v)
		}
		if strings.HasSuffix(r.URL.Path, "/check") {
			_, _ = w.Write([]byte(`{"Allowed": true}`))
			return
		}
		_, _ = w.Write([]byte("[]"))
	}))
	t.Cleanup(srv.Close)
	return rec, srv.URL
}

func (rec *tokenRecorder) last() (nomad, consul string, requests int) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	return rec.nomad, rec.consul, rec.requests
}

// TestTokenPrecedence: -token, else MESHLET_TOKEN, else NOMAD_TOKEN for the
// Nomad-shaped API and CONSUL_HTTP_TOKEN for the connect API, on official
// clients (node status, intention list) and hand-rolled requests
// (intention check) alike; never the other API's variable.
func TestTokenPrecedence(t *testing.T) {
	tests := []struct {
		name                  string
		meshlet, nomad, cnsl  string
		flag                  string
		wantNomad, wantConsul string
	}{
		{name: "none"},
		{name: "NOMAD_TOKEN and CONSUL_HTTP_TOKEN", nomad: "n", cnsl: "c", wantNomad: "n", wantConsul: "c"},
		{name: "only NOMAD_TOKEN", nomad: "n", wantNomad: "n"},
		{name: "only CONSUL_HTTP_TOKEN", cnsl: "c", wantConsul: "c"},
		{name: "MESHLET_TOKEN wins", meshlet: "m", nomad: "n", cnsl: "c", wantNomad: "m", wantConsul: "m"},
		{name: "-token wins", meshlet: "m", nomad: "n", cnsl: "c", flag: "f", wantNomad: "f", wantConsul: "f"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			rec, url := newTokenRecorder(t)
			t.Setenv("MESHLET_ADDR", url)
			t.Setenv("MESHLET_CONNECT_ADDR", url)
			t.Setenv("MESHLET_TOKEN", tc.meshlet)
			t.Setenv("NOMAD_TOKEN", tc.nomad)
			t.Setenv("CONSUL_HTTP_TOKEN", tc.cnsl)
			var flags []string
			if tc.flag != "" {
				flags = []string{"-token", tc.flag}
			}
			calls := []struct {
				args        []string
				want, other string
				consul      bool
			}{
				{args: []string{"node", "status"}, want: tc.wantNomad},
				{args: []string{"acl", "token", "list"}, want: tc.wantNomad},
				{args: []string{"intention", "list"}, want: tc.wantConsul, consul: true},
				{args: []string{"intention", "check"}, want: tc.wantConsul, consul: true},
			}
			for i, call := range calls {
				args := append(slices.Clone(call.args), flags...)
				if call.args[1] == "check" {
					args = append(args, "web", "db")
				}
				r := runCLI(t, "", args...)
				nomad, consul, n := rec.last()
				if r.code != 0 || n != i+1 {
					t.Fatalf("%v: exit %d, %d requests, stderr %q", args, r.code, n, r.stderr)
				}
				got, other := nomad, consul
				if call.consul {
					got, other = consul, nomad
				}
				if got != call.want || other != "" {
					t.Errorf("%v sent token %q (other header %q), want %q", args, got, other, call.want)
				}
			}
		})
	}
}

// TestTokenNotInHelp: -h never prints the token taken from the environment.
func TestTokenNotInHelp(t *testing.T) {
	const secret = "5ecret-0f-the-env"
	for _, v := range []string{"MESHLET_TOKEN", "NOMAD_TOKEN", "CONSUL_HTTP_TOKEN"} {
		t.Setenv(v, secret)
	}
	for _, args := range [][]string{{"acl", "token", "list", "-h"}, {"job", "status", "-h"}, {"intention", "list", "-h"}, {"connect", "envoy", "-h"}} {
		r := runCLI(t, "", args...)
		if r.code != 0 || !strings.Contains(r.stdout, "-token SECRET") || strings.Contains(r.stdout+r.stderr, secret) {
			t.Errorf("%v: exit %d, help:\n%s", args, r.code, r.stdout)
		}
	}
}

// TestTokenTransportKeepsRequest: the hand-rolled client's token header
// does not change the caller's request, nor replace a header it set.
func TestTokenTransportKeepsRequest(t *testing.T) {
	rec, url := newTokenRecorder(t)
	target := &apiTarget{Addr: url, Token: "t1", tokenHeader: consulTokenHeader}
	client, err := target.httpClient()
	if err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodGet, url+"/v1/x", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if _, consul, _ := rec.last(); consul != "t1" || req.Header.Get(consulTokenHeader) != "" {
		t.Errorf("sent %q, caller's request header %q", consul, req.Header.Get(consulTokenHeader))
	}
	req.Header.Set(consulTokenHeader, "own")
	resp, err = client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if _, consul, _ := rec.last(); consul != "own" {
		t.Errorf("sent %q, want the request's own header", consul)
	}
}
