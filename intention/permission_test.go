package intention

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"

	consul "github.com/hashicorp/consul/api"
)

func l7(src, dst string, perms ...*Permission) Intention {
	return Intention{SourceName: src, DestinationName: dst, Permissions: perms}
}

func perm(action string, h HTTPPermission) *Permission {
	return &Permission{Action: action, HTTP: &h}
}

func TestPermissionValidation(t *testing.T) {
	cases := []struct {
		name string
		in   Intention
		want string
	}{
		{"action and permissions", Intention{SourceName: "web", DestinationName: "api", Action: "allow",
			Permissions: []*Permission{perm("allow", HTTPPermission{PathPrefix: "/"})}}, "either an action or permissions"},
		{"no HTTP", l7("web", "api", &Permission{Action: "allow"}), "HTTP is required"},
		{"bad action", l7("web", "api", perm("maybe", HTTPPermission{PathPrefix: "/"})), `action "maybe"`},
		{"two paths", l7("web", "api", perm("allow", HTTPPermission{PathPrefix: "/", PathExact: "/x"})), "at most one of"},
		{"relative prefix", l7("web", "api", perm("allow", HTTPPermission{PathPrefix: "admin"})), `does not start with "/"`},
		{"bad regex", l7("web", "api", perm("allow", HTTPPermission{PathRegex: "(["})), "invalid regex"},
		{"empty match", l7("web", "api", perm("allow", HTTPPermission{})), "must match on a path"},
		{"bad method", l7("web", "api", perm("allow", HTTPPermission{Methods: []string{"FETCH"}})), `"FETCH" is not an HTTP method`},
		{"header without rule", l7("web", "api", perm("allow", HTTPPermission{Header: []HeaderPermission{{Name: "x"}}})), "exactly one of"},
		{"header two rules", l7("web", "api", perm("allow", HTTPPermission{Header: []HeaderPermission{{Name: "x", Exact: "a", Prefix: "b"}}})), "exactly one of"},
		{"nil permission", l7("web", "api", nil), "permission 0 is empty"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := normalize(c.in)
			if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("normalize = %v; want ErrInvalid containing %q", err, c.want)
			}
		})
	}
	ok, err := normalize(l7("web", "api", perm("ALLOW", HTTPPermission{Methods: []string{"get"}})))
	if err != nil || ok.Permissions[0].Action != "allow" || ok.Permissions[0].HTTP.Methods[0] != "GET" || !ok.IsL7() {
		t.Fatalf("normalize = %+v, %v; want lower-cased action and upper-cased method", ok, err)
	}
}

func TestCheckRequestSemantics(t *testing.T) {
	s, err := New("", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	mustUp := func(in Intention) {
		t.Helper()
		if _, err := s.Upsert(in, true); err != nil {
			t.Fatal(err)
		}
	}
	mustUp(l7("web", "api",
		perm("deny", HTTPPermission{PathPrefix: "/admin"}),
		perm("allow", HTTPPermission{PathRegex: "/v[12]/.*", Methods: []string{"GET", "HEAD"}}),
		perm("allow", HTTPPermission{PathExact: "/write", Header: []HeaderPermission{{Name: "x-role", Exact: "Writer", IgnoreCase: true}, {Name: "x-debug", Present: true, Invert: true}}}),
	))
	mustUp(Intention{SourceName: "*", DestinationName: "api", Action: "allow"})
	hdr := func(kv ...string) http.Header {
		h := http.Header{}
		for i := 0; i+1 < len(kv); i += 2 {
			h.Add(kv[i], kv[i+1])
		}
		return h
	}
	cases := []struct {
		src, method, path string
		h                 http.Header
		allowed           bool
		perm              int
	}{
		{"web", "GET", "/admin/users", nil, false, 0},
		{"web", "GET", "/v1/things", nil, true, 1},
		{"web", "POST", "/v1/things", nil, false, NoPermission}, // no permission: default deny, not the *→api allow
		{"web", "GET", "/v3/things", nil, false, NoPermission},
		{"web", "POST", "/write", hdr("X-Role", "writer"), true, 2},
		{"web", "POST", "/write", hdr("X-Role", "writer", "X-Debug", "1"), false, NoPermission},
		{"web", "POST", "/write", hdr("X-Role", "reader"), false, NoPermission},
		{"other", "POST", "/admin", nil, true, NoPermission}, // L4 *→api decides for another source
	}
	for _, c := range cases {
		allowed, m, p := s.CheckRequest(c.src, "api", Request{Method: c.method, Path: c.path, Header: c.h})
		if allowed != c.allowed || p != c.perm || m == nil {
			t.Errorf("%s %s %s %v: allowed=%v perm=%d matched=%v; want %v, %d", c.src, c.method, c.path, c.h, allowed, p, m, c.allowed, c.perm)
		}
	}
	// At L4, an L7 intention never allows by itself.
	if allowed, m := s.Check("web", "api"); allowed || m == nil || !m.IsL7() {
		t.Fatalf("Check(web, api) = %v, %v; want false with the L7 intention", allowed, m)
	}
}

// The JSON shape is Consul's: the official client's IntentionPermission
// decodes into ours and back without loss.
func TestPermissionJSONIsConsuls(t *testing.T) {
	in := consul.Intention{SourceName: "web", DestinationName: "api", Permissions: []*consul.IntentionPermission{{
		Action: consul.IntentionActionDeny,
		HTTP: &consul.IntentionHTTPPermission{PathPrefix: "/admin", Methods: []string{"POST"},
			Header: []consul.IntentionHTTPHeaderPermission{{Name: "x-a", Suffix: "z", Invert: true}}},
	}}}
	b, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	var ours Intention
	if err := json.Unmarshal(b, &ours); err != nil {
		t.Fatal(err)
	}
	norm, err := normalize(ours)
	if err != nil {
		t.Fatal(err)
	}
	back, _ := json.Marshal(norm)
	var theirs consul.Intention
	if err := json.Unmarshal(back, &theirs); err != nil {
		t.Fatal(err)
	}
	p := theirs.Permissions[0]
	if p.Action != "deny" || p.HTTP.PathPrefix != "/admin" || p.HTTP.Methods[0] != "POST" || p.HTTP.Header[0].Suffix != "z" || !p.HTTP.Header[0].Invert {
		t.Fatalf("round trip lost fields: %s", back)
	}
}
