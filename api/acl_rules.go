package api

import (
	"net/http"

	"github.com/meshlet/meshlet/acl"
)

// authorizer is what enforcement asks of a request's ACL: the method set
// of *acl.ACL that the Nomad routes need (a nil *acl.ACL allows all). It
// is an interface so that tests can grant finer permissions than the
// ACL's compiler gives them.
type authorizer interface {
	IsManagement() bool
	AllowNamespaceOperation(ns, capability string) bool
	AllowNodeRead() bool
	AllowNodeWrite() bool
	AllowAgentRead() bool
	AllowAgentWrite() bool
	AllowOperatorRead() bool
	AllowOperatorWrite() bool
	AllowServiceWrite(name string) bool
	AllowMeshWrite() bool
}

var _ authorizer = (*acl.ACL)(nil)

// defaultNamespace is the namespace of a request without ?namespace=.
const defaultNamespace = "default"

// rule is what a route requires of the caller's token.
type rule struct {
	// open routes are served without resolving a token (Nomad's
	// unauthenticated endpoints).
	open bool
	// allow decides on the resolved ACL; nil allows any token, the
	// anonymous one included (the handler decides, as the ACL
	// endpoints do).
	allow func(a authorizer, r *http.Request) bool
}

// requestNamespace is the namespace a request acts in: always "default".
func requestNamespace(r *http.Request) string {
	// oneNamespace let only "default" and "*" (every namespace: the one
	// there is) through.
	return defaultNamespace
}

// nsCap requires one of the namespace capabilities in the request's
// namespace.
func nsCap(caps ...string) rule {
	return rule{allow: func(a authorizer, r *http.Request) bool {
		ns := requestNamespace(r)
		for _, c := range caps {
			if a.AllowNamespaceOperation(ns, c) {
				return true
			}
		}
		return false
	}}
}

// need requires a coarse-grained permission.
func need(fn func(a authorizer) bool) rule {
	return rule{allow: func(a authorizer, _ *http.Request) bool { return fn(a) }}
}

var (
	ruleOpen       = rule{open: true}
	ruleAnyToken   = rule{}
	ruleManagement = need(authorizer.IsManagement)
	ruleNodeRead   = need(authorizer.AllowNodeRead)
	ruleNodeWrite  = need(authorizer.AllowNodeWrite)
	ruleReadJob    = nsCap(acl.NamespaceCapabilityReadJob)
	ruleSubmitJob  = nsCap(acl.NamespaceCapabilitySubmitJob)
)

// nomadRules maps every route pattern of routes() to what it requires, as
// Nomad's API documentation states it. A pattern missing here requires a
// management token (fail closed); TestACLRulesCoverRoutes keeps the table
// and the routes in step.
var nomadRules = map[string]rule{
	// Jobs.
	"GET /v1/jobs":                        nsCap(acl.NamespaceCapabilityListJobs),
	"PUT /v1/jobs":                        ruleSubmitJob,
	"POST /v1/jobs":                       ruleSubmitJob,
	"PUT /v1/jobs/parse":                  nsCap(acl.NamespaceCapabilityParseJob, acl.NamespaceCapabilitySubmitJob),
	"POST /v1/jobs/parse":                 nsCap(acl.NamespaceCapabilityParseJob, acl.NamespaceCapabilitySubmitJob),
	"GET /v1/job/{id}":                    ruleReadJob,
	"PUT /v1/job/{id}":                    ruleSubmitJob,
	"POST /v1/job/{id}":                   ruleSubmitJob,
	"DELETE /v1/job/{id}":                 ruleSubmitJob,
	"GET /v1/job/{id}/allocations":        ruleReadJob,
	"GET /v1/job/{id}/summary":            ruleReadJob,
	"GET /v1/job/{id}/evaluations":        ruleReadJob,
	"GET /v1/job/{id}/versions":           ruleReadJob,
	"GET /v1/job/{id}/deployment":         ruleReadJob,
	"GET /v1/job/{id}/deployments":        ruleReadJob,
	"GET /v1/allocations":                 ruleReadJob,
	"GET /v1/allocation/{id}":             ruleReadJob,
	"GET /v1/evaluations":                 ruleReadJob,
	"GET /v1/evaluation/{id}":             ruleReadJob,
	"GET /v1/evaluation/{id}/allocations": ruleReadJob,

	// Client (allocation) endpoints. Exec is checked again in its handler
	// against the allocation's namespace, with alloc-node-exec for a task
	// its driver does not isolate (authorizeExec).
	"GET /v1/client/fs/logs/{alloc}":           nsCap(acl.NamespaceCapabilityReadLogs, acl.NamespaceCapabilityReadFS),
	"GET /v1/client/allocation/{alloc}/exec":   nsCap(acl.NamespaceCapabilityAllocExec),
	"GET /v1/client/allocation/{alloc}/checks": ruleReadJob,

	// Nodes.
	"GET /v1/nodes":     ruleNodeRead,
	"GET /v1/node/{id}": ruleNodeRead,
	"GET /v1/node/{id}/allocations": {allow: func(a authorizer, r *http.Request) bool {
		return a.AllowNodeRead() && a.AllowNamespaceOperation(requestNamespace(r), acl.NamespaceCapabilityReadJob)
	}},
	"PUT /v1/node/{id}/eligibility":  ruleNodeWrite,
	"POST /v1/node/{id}/eligibility": ruleNodeWrite,
	"PUT /v1/node/{id}/drain":        ruleNodeWrite,
	"POST /v1/node/{id}/drain":       ruleNodeWrite,

	// Agent, status, cluster.
	"GET /v1/agent/self":         need(authorizer.AllowAgentRead),
	"GET /v1/agent/health":       ruleOpen,
	"GET /v1/status/leader":      ruleOpen,
	"GET /v1/status/peers":       ruleOpen,
	"GET /v1/regions":            ruleOpen,
	"GET /v1/metrics":            ruleOpen,
	"GET /v1/agent/members":      ruleNodeRead,
	"PUT /v1/agent/force-leave":  need(authorizer.AllowAgentWrite),
	"POST /v1/agent/force-leave": need(authorizer.AllowAgentWrite),
	"GET /v1/operator/snapshot":  ruleManagement,
	"PUT /v1/operator/snapshot":  ruleManagement,

	// ACL endpoints: bootstrap is unauthenticated; the reads a token may
	// make of itself check in their handlers; the rest is management.
	"PUT /v1/acl/bootstrap":           ruleOpen,
	"POST /v1/acl/bootstrap":          ruleOpen,
	"GET /v1/acl/policies":            ruleAnyToken,
	"GET /v1/acl/policy/self":         ruleAnyToken,
	"GET /v1/acl/policy/{name}":       ruleAnyToken,
	"PUT /v1/acl/policy/{name}":       ruleManagement,
	"POST /v1/acl/policy/{name}":      ruleManagement,
	"DELETE /v1/acl/policy/{name}":    ruleManagement,
	"GET /v1/acl/tokens":              ruleManagement,
	"PUT /v1/acl/token":               ruleManagement,
	"POST /v1/acl/token":              ruleManagement,
	"GET /v1/acl/token/self":          ruleAnyToken,
	"GET /v1/acl/token/{accessor}":    ruleManagement,
	"PUT /v1/acl/token/{accessor}":    ruleManagement,
	"POST /v1/acl/token/{accessor}":   ruleManagement,
	"DELETE /v1/acl/token/{accessor}": ruleManagement,
}

// ruleFor is the rule of a route pattern (management when unknown).
func ruleFor(pattern string) rule {
	if rl, ok := nomadRules[pattern]; ok {
		return rl
	}
	return ruleManagement
}
