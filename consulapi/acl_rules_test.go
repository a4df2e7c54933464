package consulapi

import (
	"go/ast"
	"go/parser"
	"go/token"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// routePattern matches a route pattern literal ("GET /v1/catalog/services").
var routePattern = regexp.MustCompile(`^(GET|PUT|POST|DELETE) /v1/`)

// sourceRoutes collects the route patterns written in the package's
// non-test sources, except the rule table's file.
func sourceRoutes(t *testing.T, skip string) []string {
	t.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") || name == skip {
			continue
		}
		src, err := os.ReadFile(name)
		if err != nil {
			t.Fatal(err)
		}
		f, err := parser.ParseFile(fset, name, src, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if v, err := strconv.Unquote(lit.Value); err == nil && routePattern.MatchString(v) {
					out = append(out, v)
				}
			}
			return true
		})
	}
	return out
}

// TestACLRulesCoverRoutes checks that every route has a rule and that
// every rule names a route the mux serves under that very pattern.
func TestACLRulesCoverRoutes(t *testing.T) {
	routes := sourceRoutes(t, "acl_rules.go")
	if len(routes) < 25 {
		t.Fatalf("found only %d route patterns in the sources: %v", len(routes), routes)
	}
	for _, p := range routes {
		if _, ok := consulRules[p]; !ok {
			t.Errorf("route %q has no ACL rule in consulRules", p)
		}
	}
	s := NewServer(Deps{}, nil)
	for p := range consulRules {
		method, path, _ := strings.Cut(p, " ")
		path = regexp.MustCompile(`\{[a-z]+\}`).ReplaceAllString(path, "x")
		if _, got := s.mux.Handler(httptest.NewRequest(method, path, nil)); got != p {
			t.Errorf("rule %q: the mux routes %s %s to %q", p, method, path, got)
		}
	}
}
