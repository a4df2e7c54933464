package xds

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	promtest "github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/meshlet/meshlet/acl"
)

// liveACLs is tokenACLs that a test may change while streams are open; a
// secret in broken fails to resolve for a reason other than "not found"
// (the servers unreachable from a client agent).
type liveACLs struct {
	mu     sync.Mutex
	acls   map[string]*acl.ACL
	broken map[string]bool
}

func (l *liveACLs) Resolve(_ context.Context, secret string) (*acl.ACL, *acl.Token, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.broken[secret] {
		return nil, nil, errors.New("rpc error: no server reachable")
	}
	a, ok := l.acls[secret]
	if !ok {
		return nil, nil, fmt.Errorf("%w: no token for that secret", acl.ErrTokenNotFound)
	}
	return a, &acl.Token{AccessorID: "accessor-" + secret}, nil
}

func (l *liveACLs) set(edit func(acls map[string]*acl.ACL, broken map[string]bool)) {
	l.mu.Lock()
	defer l.mu.Unlock()
	edit(l.acls, l.broken)
}

// Open streams lose what their token no longer grants: a deleted token
// (the allocation socket's sidecar token, revoked when its allocation
// stopped), a token that lost service:write and a management token that
// was deleted all end with PermissionDenied within the re-check interval.
// A stream whose token cannot be resolved for another reason (servers
// unreachable) keeps running, and so does a token still valid.
func TestRevokedTokensEndStreams(t *testing.T) {
	si, err := acl.NewACL(false, []*acl.Policy{{Name: "si", Rules: acl.ServiceIdentityRules("api")}})
	if err != nil {
		t.Fatal(err)
	}
	tokens := &liveACLs{broken: map[string]bool{}, acls: map[string]*acl.ACL{
		"api-si": si, "api-w": compiled(t, `service "api" { policy = "write" }`),
		"dash-w": compiled(t, `service "dash" { policy = "write" }`), "flaky": compiled(t, `service "dash" { policy = "write" }`),
		"mgmt": acl.ManagementACL(), "kept": compiled(t, `service "api" { policy = "write" }`),
	}}
	e := newAllocEnvConfig(t, func(c *Config) { c.ACL = tokens; c.ACLRecheck = 20 * time.Millisecond })
	for _, delta := range []bool{false, true} {
		t.Run(fmt.Sprintf("delta=%v", delta), func(t *testing.T) {
			e.t = t
			last := map[*adsClient]string{} // SotW: the last Secret response's version and nonce
			open := func(conn, token, node string) *adsClient {
				target := e.addr
				if conn == "socket" {
					target = "unix://" + e.pathA
				}
				c := e.dialConn(e.tokenConnTo(target, token), node, delta)
				c.t = t
				leaf := LeafSecretName("api")
				if node == dashPx {
					leaf = LeafSecretName("dash")
				}
				if delta {
					wantNames(t, token+"'s secrets", c.secretsOf(leaf), leaf)
					return c
				}
				c.req(secretType, []string{leaf}, "", "", "")
				m := c.next(secretType)
				wantNames(t, token+"'s secrets", asAny(decode(t, m)), leaf)
				last[c] = m.GetVersionInfo() + " " + m.GetNonce()
				return c
			}
			// more subscribes the stream to the roots as well, on the same
			// stream (SotW: acknowledging the last response).
			more := func(c *adsClient, leaf string) map[string]any {
				if delta {
					c.dreq(secretType, []string{RootsSecret}, nil, "", "")
					return asAny(decode(t, c.dnext(secretType)))
				}
				var version, nonce string
				fmt.Sscan(last[c], &version, &nonce)
				c.req(secretType, []string{leaf, RootsSecret}, version, nonce, "")
				return asAny(decode(t, c.next(secretType)))
			}
			sidecar := open("socket", "api-si", apiNode)
			writer := open("tcp", "api-w", apiNode)
			mgmt := open("tcp", "mgmt", dashPx)
			flaky := open("tcp", "flaky", dashPx)
			kept := open("tcp", "kept", apiNode)
			defer tokens.set(func(acls map[string]*acl.ACL, broken map[string]bool) {
				acls["api-si"], acls["mgmt"] = si, acl.ManagementACL()
				acls["api-w"] = compiled(t, `service "api" { policy = "write" }`)
				delete(broken, "flaky")
			})
			tokens.set(func(acls map[string]*acl.ACL, broken map[string]bool) {
				delete(acls, "api-si")
				delete(acls, "mgmt")
				acls["api-w"] = compiled(t, `service "api" { policy = "read" }`)
				broken["flaky"] = true
			})
			for name, c := range map[string]*adsClient{"deleted sidecar token": sidecar, "write taken away": writer, "deleted management token": mgmt} {
				if code, msg := c.ended(); code.String() != "PermissionDenied" {
					t.Errorf("%s: stream ended with %v (%s), want PermissionDenied", name, code, msg)
				}
			}
			// Several re-checks have run by now (20 ms apart): the others
			// still answer on the same stream.
			time.Sleep(100 * time.Millisecond)
			tokens.set(func(_ map[string]*acl.ACL, broken map[string]bool) { delete(broken, "flaky") })
			for name, got := range map[string]map[string]any{
				"unresolvable token's stream": more(flaky, LeafSecretName("dash")), "valid token's stream": more(kept, LeafSecretName("api")),
			} {
				if got[RootsSecret] == nil {
					t.Errorf("%s: no roots in the answer to a new subscription: %v", name, got)
				}
			}
			flaky.close()
			kept.close()
		})
	}
	if n := promtest.ToFloat64(e.srv.m.revoked); n != 6 {
		t.Errorf("meshlet_xds_revoked_streams_total = %v, want 6", n)
	}
}
