// Package acl owns meshlet's access control: the token and policy types
// (types.go, a frozen contract), the policy language (Parse: Nomad's
// namespace, host_volume, node, agent, operator, quota and plugin rules
// plus Consul's service, service_prefix and mesh rules), its compiled
// form (ACL, built by Compile or NewACL) and the Resolver that turns a
// request's secret into an ACL.
//
// Concurrency: Parse and Compile are pure; an ACL is immutable and may be
// shared by any number of goroutines; a Resolver is safe for concurrent
// use (one mutex over its caches, never held across a Reader call).
package acl
