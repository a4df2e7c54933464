package consulapi

import (
	"bytes"
	"io"
	"net/http"

	"github.com/meshlet/meshlet/configentry"
)

// rule is what a route requires of the caller's token, as Consul's API
// documentation states it.
type rule struct {
	// open routes resolve no token (the CA roots are public).
	open bool
	// allow decides on the caller's ACL; an error (a malformed request
	// the rule cannot judge) is answered as failFor answers it. nil
	// allows any token, the anonymous one included.
	allow func(s *Server, a authorizer, r *http.Request) (bool, error)
	// view, when set, serves the route in place of its handler over
	// stores filtered to what the caller may read (list endpoints).
	view func(s *Server, w http.ResponseWriter, r *http.Request)
}

var ruleManagement = rule{allow: func(_ *Server, a authorizer, _ *http.Request) (bool, error) {
	return a.IsManagement(), nil
}}

// need requires a coarse-grained permission.
func need(fn func(a authorizer) bool) rule {
	return rule{allow: func(_ *Server, a authorizer, _ *http.Request) (bool, error) { return fn(a), nil }}
}

// servicePath requires service read on the path's {name}.
var servicePath = rule{allow: func(_ *Server, a authorizer, r *http.Request) (bool, error) {
	return a.AllowServiceRead(r.PathValue("name")), nil
}}

// consulRules maps every route of routes() to its rule; a pattern missing
// here requires a management token (fail closed), and
// TestACLRulesCoverRoutes keeps the two in step.
var consulRules = map[string]rule{
	"GET /v1/catalog/services":       {view: (*Server).catalogServices},
	"GET /v1/catalog/service/{name}": servicePath,
	"GET /v1/health/service/{name}":  servicePath,
	"GET /v1/health/connect/{name}":  servicePath,

	"GET /v1/connect/intentions":          {view: (*Server).intentionList},
	"POST /v1/connect/intentions":         {allow: allowIntentionCreate},
	"GET /v1/connect/intentions/exact":    {allow: intentionQuery(false)},
	"PUT /v1/connect/intentions/exact":    {allow: intentionQuery(true)},
	"DELETE /v1/connect/intentions/exact": {allow: intentionQuery(true)},
	"GET /v1/connect/intentions/check":    {allow: intentionQuery(false)},
	"GET /v1/connect/intentions/match":    {view: (*Server).intentionMatch},
	"GET /v1/connect/intentions/{id}":     {allow: intentionByID(false)},
	"PUT /v1/connect/intentions/{id}":     {allow: allowIntentionUpdate},
	"DELETE /v1/connect/intentions/{id}":  {allow: intentionByID(true)},

	"GET /v1/connect/ca/roots":             {open: true},
	"GET /v1/agent/connect/ca/roots":       {open: true},
	"GET /v1/connect/ca/configuration":     need(authorizer.AllowOperatorRead),
	"PUT /v1/connect/ca/configuration":     need(authorizer.AllowOperatorWrite),
	"GET /v1/agent/connect/ca/leaf/{name}": {allow: allowLeaf},
	"POST /v1/agent/connect/authorize":     {allow: allowAuthorize},
	"PUT /v1/agent/connect/authorize":      {allow: allowAuthorize},

	"PUT /v1/config":                  {allow: allowConfigPut},
	"GET /v1/config/{kind}":           {view: (*Server).configList},
	"GET /v1/config/{kind}/{name}":    {allow: configPath(false)},
	"DELETE /v1/config/{kind}/{name}": {allow: configPath(true)},

	"PUT /v1/catalog/register":   {allow: allowCatalogRegister},
	"PUT /v1/catalog/deregister": {allow: allowCatalogDeregister},

	"GET /v1/acl/token/self": {},
}

// leafServiceValue is the request value (r.PathValue, no path wildcard)
// in which allowLeaf hands caLeaf the service it approved.
const leafServiceValue = "meshlet.leaf_service"

// allowLeaf requires service write on the service whose leaf is asked
// for: the path names a service, or an instance ID resolving to its
// service (a sidecar's to the service it fronts). caLeaf issues the leaf
// of the service approved here, not one it resolves again: the catalog
// may have changed in between.
func allowLeaf(s *Server, a authorizer, r *http.Request) (bool, error) {
	service := s.leafService(r.PathValue("name"))
	if !a.AllowServiceWrite(service) {
		return false, nil
	}
	r.SetPathValue(leafServiceValue, service)
	return true, nil
}

// allowAuthorize requires service write on the request's Target.
func allowAuthorize(_ *Server, a authorizer, r *http.Request) (bool, error) {
	var req struct {
		Target           string
		ClientCertURI    string
		ClientCertSerial string
	}
	if err := peekBody(r, &req); err != nil {
		return false, err
	}
	return a.AllowServiceWrite(req.Target), nil
}

// allowIntentionCreate requires intention write on the new intention's
// destination.
func allowIntentionCreate(_ *Server, a authorizer, r *http.Request) (bool, error) {
	var body intentionBody
	if err := peekBody(r, &body); err != nil {
		return false, err
	}
	return a.AllowIntentionWrite(body.DestinationName), nil
}

// allowIntentionUpdate requires intention write on the new intention's
// destination and, as intentionByID, on the stored one's (judged again by
// the store on the intention it updates: intentionWritePre).
func allowIntentionUpdate(s *Server, a authorizer, r *http.Request) (bool, error) {
	var body intentionBody
	if err := peekBody(r, &body); err != nil {
		return false, err
	}
	if !a.AllowIntentionWrite(body.DestinationName) {
		return false, nil
	}
	return intentionByID(true)(s, a, r)
}

// intentionQuery requires intention read (or write) on ?destination=.
func intentionQuery(write bool) func(*Server, authorizer, *http.Request) (bool, error) {
	return func(_ *Server, a authorizer, r *http.Request) (bool, error) {
		_, _, _, dst, err := exactPair(r)
		if err != nil {
			return false, err
		}
		if write {
			return a.AllowIntentionWrite(dst), nil
		}
		return a.AllowIntentionRead(dst), nil
	}
}

// intentionByID requires intention read (or write) on the destination of
// the intention the path names; an ID this agent's copy does not hold is
// left to the handler: it answers 404, or for a write has the store judge
// the token on the intention it changes (intentionWritePre), since the
// copy may lag the cluster.
func intentionByID(write bool) func(*Server, authorizer, *http.Request) (bool, error) {
	return func(s *Server, a authorizer, r *http.Request) (bool, error) {
		in, err := s.d.Intentions.GetByID(r.PathValue("id"))
		if err != nil {
			return true, nil
		}
		if write {
			return a.AllowIntentionWrite(in.DestinationName), nil
		}
		return a.AllowIntentionRead(in.DestinationName), nil
	}
}

// allowConfigPut judges a config entry write by the entry's kind and
// name, decoded as configPut decodes them.
func allowConfigPut(_ *Server, a authorizer, r *http.Request) (bool, error) {
	var raw map[string]any
	if err := peekBody(r, &raw); err != nil {
		return false, err
	}
	e, err := configentry.Decode(raw)
	if err != nil {
		return false, badRequest("%v", err)
	}
	return configentry.WriteAllowed(a, e), nil
}

// configPath judges a config entry read (or delete) by the path's kind
// and name.
func configPath(write bool) func(*Server, authorizer, *http.Request) (bool, error) {
	return func(_ *Server, a authorizer, r *http.Request) (bool, error) {
		return configentry.Allowed(a, r.PathValue("kind"), r.PathValue("name"), write), nil
	}
}

// peekBody decodes the request body into v as decodeBody does and puts
// the bytes back for the handler.
func peekBody(r *http.Request, v any) error {
	raw, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return badRequest("failed to read request body: %v", err)
	}
	r.Body = io.NopCloser(io.MultiReader(bytes.NewReader(raw), r.Body))
	// decodeBody answers a body over maxBody as too large (413).
	return decodeBody(&http.Request{Body: io.NopCloser(bytes.NewReader(raw))}, v)
}
