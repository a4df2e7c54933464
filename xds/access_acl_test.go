package xds

import (
	"context"
	"fmt"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/meshlet/meshlet/acl"
)

// tokenACLs resolves test secrets to ACLs compiled from real policies.
type tokenACLs map[string]*acl.ACL

func (m tokenACLs) Resolve(_ context.Context, secret string) (*acl.ACL, *acl.Token, error) {
	a, ok := m[secret]
	if !ok {
		return nil, nil, fmt.Errorf("%w: no token for that secret", acl.ErrTokenNotFound)
	}
	return a, &acl.Token{AccessorID: "accessor-" + secret}, nil
}

func compiled(t *testing.T, rules string) *acl.ACL {
	t.Helper()
	a, err := acl.NewACL(false, []*acl.Policy{{Name: "p", Rules: rules}})
	if err != nil {
		t.Fatalf("policy %q: %v", rules, err)
	}
	return a
}

// tokenConn is a client connection to the host listener sending token as
// x-consul-token on every stream ("" sends none).
func (e *allocEnv) tokenConn(token string) *grpc.ClientConn {
	e.t.Helper()
	return e.tokenConnTo(e.addr, token)
}

// tokenConnTo is tokenConn to another target (an allocation's socket).
func (e *allocEnv) tokenConnTo(target, token string) *grpc.ClientConn {
	e.t.Helper()
	opts := []grpc.DialOption{grpc.WithTransportCredentials(insecure.NewCredentials())}
	if token != "" {
		opts = append(opts, grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn,
			method string, streamer grpc.Streamer, o ...grpc.CallOption) (grpc.ClientStream, error) {
			return streamer(metadata.AppendToOutgoingContext(ctx, tokenMetadata, token), desc, cc, method, o...)
		}))
	}
	conn, err := grpc.NewClient(target, opts...)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// With ACLs the host listener (TCP 8502) serves a stream only what its
// x-consul-token allows: a token with service:write on "api" gets the api
// proxy's config and leaf, and nothing of "dash"; no token or an unknown
// one gets nothing; a management token gets everything, as before.
func TestHostListenerACL(t *testing.T) {
	tokens := tokenACLs{
		"mgmt":     acl.ManagementACL(),
		"api-w":    compiled(t, `service "api" { policy = "write" }`),
		"api-r":    compiled(t, `service "api" { policy = "read" }`),
		"prefix-w": compiled(t, `service_prefix "" { policy = "write" }`),
	}
	e := newAllocEnvConfig(t, func(c *Config) { c.ACL = tokens })
	for _, delta := range []bool{false, true} {
		t.Run(fmt.Sprintf("delta=%v", delta), func(t *testing.T) {
			e.t = t
			// The api token: its own proxy's leaf and listeners.
			c := e.dialConn(e.tokenConn("api-w"), apiNode, delta)
			c.t = t
			wantNames(t, "api token's secrets", c.secretsOf(LeafSecretName("api"), RootsSecret), LeafSecretName("api"), RootsSecret)
			c.close()

			denied := []struct {
				name, token, node string
				secrets           []string
			}{
				{"no token", "", apiNode, []string{LeafSecretName("api")}},
				{"unknown token", "forged", apiNode, []string{LeafSecretName("api")}},
				{"api token acting as dash's proxy", "api-w", dashPx, []string{LeafSecretName("dash")}},
				{"api token asking dash's leaf", "api-w", apiNode, []string{LeafSecretName("dash")}},
				{"read-only token", "api-r", apiNode, []string{LeafSecretName("api")}},
				{"api token without a node", "api-w", "", []string{RootsSecret}},
			}
			for _, d := range denied {
				c := e.dialConn(e.tokenConn(d.token), d.node, delta)
				c.t = t
				if delta {
					c.dreq(secretType, d.secrets, nil, "", "")
				} else {
					c.req(secretType, d.secrets, "", "", "")
				}
				if code, msg := c.ended(); code.String() != "PermissionDenied" {
					t.Errorf("%s: stream ended with %v (%s), want PermissionDenied", d.name, code, msg)
				}
			}

			// A token with write on every service may act as either proxy,
			// one at a time; management gets any leaf on one stream.
			c = e.dialConn(e.tokenConn("prefix-w"), dashPx, delta)
			c.t = t
			wantNames(t, "prefix token as dash", c.secretsOf(LeafSecretName("dash")), LeafSecretName("dash"))
			c.close()
			c = e.dialConn(e.tokenConn("mgmt"), apiNode, delta)
			c.t = t
			wantNames(t, "management secrets", c.secretsOf(LeafSecretName("api"), LeafSecretName("dash")), LeafSecretName("api"), LeafSecretName("dash"))
			c.close()
		})
	}
}

// With ACLs an allocation's socket also wants the sidecar's token: the
// api sidecar's service identity token (service:write on api) gets its
// own config and leaf there; no token, another service's token or a
// read-only one get nothing, so another task of the allocation that can
// reach the socket cannot take the sidecar's identity. A token with
// write on every service still gets only the allocation's own proxy.
func TestAllocSocketACL(t *testing.T) {
	si, err := acl.NewACL(false, []*acl.Policy{{Name: "si", Rules: acl.ServiceIdentityRules("api")}})
	if err != nil {
		t.Fatal(err)
	}
	tokens := tokenACLs{
		"api-si":   si,
		"dash-w":   compiled(t, `service "dash" { policy = "write" }`),
		"api-r":    compiled(t, `service "api" { policy = "read" }`),
		"prefix-w": compiled(t, `service_prefix "" { policy = "write" }`),
	}
	e := newAllocEnvConfig(t, func(c *Config) { c.ACL = tokens })
	sock := "unix://" + e.pathA
	for _, delta := range []bool{false, true} {
		t.Run(fmt.Sprintf("delta=%v", delta), func(t *testing.T) {
			e.t = t
			c := e.dialConn(e.tokenConnTo(sock, "api-si"), apiNode, delta)
			c.t = t
			wantNames(t, "service identity's secrets", c.secretsOf(LeafSecretName("api"), RootsSecret), LeafSecretName("api"), RootsSecret)
			c.close()
			for _, d := range []struct{ name, token, node string }{
				{"no token", "", apiNode},
				{"unknown token", "forged", apiNode},
				{"another service's token", "dash-w", apiNode},
				{"read-only token", "api-r", apiNode},
				{"write-all token as the other allocation's proxy", "prefix-w", dashPx},
			} {
				c := e.dialConn(e.tokenConnTo(sock, d.token), d.node, delta)
				c.t = t
				if delta {
					c.dreq(secretType, []string{RootsSecret}, nil, "", "")
				} else {
					c.req(secretType, []string{RootsSecret}, "", "", "")
				}
				if code, msg := c.ended(); code.String() != "PermissionDenied" {
					t.Errorf("%s: stream ended with %v (%s), want PermissionDenied", d.name, code, msg)
				}
			}
		})
	}
}
