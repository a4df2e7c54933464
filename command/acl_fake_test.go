package command

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	nomadapi "github.com/hashicorp/nomad/api"
)

// fakeACL mimics the agent's Nomad-shaped ACL endpoints in memory, with
// nomad/api's JSON shapes and headers. Every request but the bootstrap
// needs the X-Nomad-Token of a known token, and all but token self a
// management one (403 otherwise, with Nomad's messages). Like Nomad it
// returns a token's secret from token info too: the CLI must hide it.
type fakeACL struct {
	mu       sync.Mutex
	index    uint64
	booted   bool
	policies map[string]*nomadapi.ACLPolicy
	tokens   map[string]*nomadapi.ACLToken // by accessor, secrets included
	seen     []string                      // the X-Nomad-Token of each request
}

// newFakeACL serves a fakeACL on loopback and points MESHLET_ADDR at it;
// the token variables are cleared.
func newFakeACL(t *testing.T) *fakeACL {
	t.Helper()
	f := &fakeACL{policies: map[string]*nomadapi.ACLPolicy{}, tokens: map[string]*nomadapi.ACLToken{}}
	mux := http.NewServeMux()
	mux.HandleFunc("PUT /v1/acl/bootstrap", f.bootstrap)
	mux.HandleFunc("GET /v1/acl/policies", f.management(f.listPolicies))
	mux.HandleFunc("GET /v1/acl/policy/{name}", f.management(f.getPolicy))
	mux.HandleFunc("PUT /v1/acl/policy/{name}", f.management(f.putPolicy))
	mux.HandleFunc("DELETE /v1/acl/policy/{name}", f.management(f.deletePolicy))
	mux.HandleFunc("GET /v1/acl/tokens", f.management(f.listTokens))
	mux.HandleFunc("PUT /v1/acl/token", f.management(f.createToken))
	mux.HandleFunc("GET /v1/acl/token/self", f.self)
	mux.HandleFunc("GET /v1/acl/token/{accessor}", f.management(f.getToken))
	mux.HandleFunc("PUT /v1/acl/token/{accessor}", f.management(f.updateToken))
	mux.HandleFunc("DELETE /v1/acl/token/{accessor}", f.management(f.deleteToken))
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.seen = append(f.seen, r.Header.Get(nomadTokenHeader))
		w.Header().Set("X-Nomad-Index", fmt.Sprint(f.index))
		w.Header().Set("X-Nomad-LastContact", "0")
		w.Header().Set("X-Nomad-KnownLeader", "true")
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	t.Setenv("MESHLET_ADDR", srv.URL)
	for _, v := range []string{"MESHLET_TOKEN", "NOMAD_TOKEN", "CONSUL_HTTP_TOKEN"} {
		t.Setenv(v, "")
	}
	return f
}

// lastToken is the X-Nomad-Token of the last request.
func (f *fakeACL) lastToken() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.seen) == 0 {
		return "<no request>"
	}
	return f.seen[len(f.seen)-1]
}

// management wraps h: the request's token must be a management one.
func (f *fakeACL) management(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		tok := f.bySecret(r.Header.Get(nomadTokenHeader))
		switch {
		case tok == nil:
			http.Error(w, "ACL token not found", http.StatusForbidden)
		case tok.Type != "management":
			http.Error(w, "Permission denied", http.StatusForbidden)
		default:
			h(w, r)
		}
	}
}

func (f *fakeACL) bySecret(secret string) *nomadapi.ACLToken {
	for _, tok := range f.tokens {
		if secret != "" && tok.SecretID == secret {
			return tok
		}
	}
	return nil
}

func writeJSONResponse(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(v)
}

func (f *fakeACL) bootstrap(w http.ResponseWriter, r *http.Request) {
	if f.booted {
		http.Error(w, "ACL bootstrap already done (reset index: 1)", http.StatusBadRequest)
		return
	}
	var req nomadapi.BootstrapRequest
	if r.ContentLength != 0 {
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	f.booted = true
	tok := f.store(&nomadapi.ACLToken{Name: "Bootstrap Token", Type: "management", Global: true})
	if req.BootstrapSecret != "" {
		tok.SecretID = req.BootstrapSecret // the operator's chosen secret
	}
	writeJSONResponse(w, tok)
}

// store saves a new token with fresh IDs and returns it, secret included.
func (f *fakeACL) store(tok *nomadapi.ACLToken) *nomadapi.ACLToken {
	f.index++
	tok.AccessorID, tok.SecretID = uuid.NewString(), uuid.NewString()
	tok.CreateTime = time.Date(2096, 12, 4, 17, 0, 0, 0, time.UTC)
	if tok.ExpirationTTL > 0 {
		exp := tok.CreateTime.Add(tok.ExpirationTTL)
		tok.ExpirationTime = &exp
	}
	tok.ExpirationTTL = 0
	tok.CreateIndex, tok.ModifyIndex = f.index, f.index
	f.tokens[tok.AccessorID] = tok
	return tok
}

func (f *fakeACL) listPolicies(w http.ResponseWriter, _ *http.Request) {
	out := []*nomadapi.ACLPolicyListStub{}
	for _, p := range f.policies {
		out = append(out, &nomadapi.ACLPolicyListStub{Name: p.Name, Description: p.Description, CreateIndex: p.CreateIndex, ModifyIndex: p.ModifyIndex})
	}
	slices.SortFunc(out, func(a, b *nomadapi.ACLPolicyListStub) int { return strings.Compare(a.Name, b.Name) })
	writeJSONResponse(w, out)
}

func (f *fakeACL) getPolicy(w http.ResponseWriter, r *http.Request) {
	p, ok := f.policies[r.PathValue("name")]
	if !ok {
		http.Error(w, "ACL policy not found", http.StatusNotFound)
		return
	}
	writeJSONResponse(w, p)
}

func (f *fakeACL) putPolicy(w http.ResponseWriter, r *http.Request) {
	var p nomadapi.ACLPolicy
	if err := json.NewDecoder(r.Body).Decode(&p); err != nil || p.Name != r.PathValue("name") || p.Rules == "" {
		http.Error(w, "invalid ACL policy", http.StatusBadRequest)
		return
	}
	f.index++
	p.CreateIndex, p.ModifyIndex = f.index, f.index
	if old, ok := f.policies[p.Name]; ok {
		p.CreateIndex = old.CreateIndex
	}
	f.policies[p.Name] = &p
}

func (f *fakeACL) deletePolicy(w http.ResponseWriter, r *http.Request) {
	if _, ok := f.policies[r.PathValue("name")]; !ok {
		http.Error(w, "ACL policy not found", http.StatusNotFound)
		return
	}
	f.index++
	delete(f.policies, r.PathValue("name"))
}

func (f *fakeACL) listTokens(w http.ResponseWriter, _ *http.Request) {
	out := []*nomadapi.ACLTokenListStub{}
	for _, tok := range f.tokens {
		out = append(out, &nomadapi.ACLTokenListStub{AccessorID: tok.AccessorID, Name: tok.Name, Type: tok.Type, Policies: tok.Policies,
			Global: tok.Global, CreateTime: tok.CreateTime, ExpirationTime: tok.ExpirationTime, CreateIndex: tok.CreateIndex, ModifyIndex: tok.ModifyIndex})
	}
	slices.SortFunc(out, func(a, b *nomadapi.ACLTokenListStub) int { return strings.Compare(a.Name, b.Name) })
	writeJSONResponse(w, out)
}

func (f *fakeACL) createToken(w http.ResponseWriter, r *http.Request) {
	var tok nomadapi.ACLToken
	if err := json.NewDecoder(r.Body).Decode(&tok); err != nil || tok.AccessorID != "" {
		http.Error(w, "invalid ACL token", http.StatusBadRequest)
		return
	}
	writeJSONResponse(w, f.store(&tok))
}

func (f *fakeACL) self(w http.ResponseWriter, r *http.Request) {
	tok := f.bySecret(r.Header.Get(nomadTokenHeader))
	if tok == nil {
		http.Error(w, "ACL token not found", http.StatusForbidden)
		return
	}
	writeJSONResponse(w, tok)
}

func (f *fakeACL) getToken(w http.ResponseWriter, r *http.Request) {
	tok, ok := f.tokens[r.PathValue("accessor")]
	if !ok {
		http.Error(w, "ACL token not found", http.StatusNotFound)
		return
	}
	writeJSONResponse(w, tok)
}

func (f *fakeACL) updateToken(w http.ResponseWriter, r *http.Request) {
	old, ok := f.tokens[r.PathValue("accessor")]
	var tok nomadapi.ACLToken
	switch err := json.NewDecoder(r.Body).Decode(&tok); {
	case !ok:
		http.Error(w, "ACL token not found", http.StatusNotFound)
		return
	case err != nil || tok.AccessorID != old.AccessorID:
		http.Error(w, "invalid ACL token", http.StatusBadRequest)
		return
	}
	f.index++
	old.Name, old.Type, old.Policies, old.Global, old.ModifyIndex = tok.Name, tok.Type, tok.Policies, tok.Global, f.index
	writeJSONResponse(w, old)
}

func (f *fakeACL) deleteToken(w http.ResponseWriter, r *http.Request) {
	if _, ok := f.tokens[r.PathValue("accessor")]; !ok {
		http.Error(w, "ACL token not found", http.StatusNotFound)
		return
	}
	f.index++
	delete(f.tokens, r.PathValue("accessor"))
}
