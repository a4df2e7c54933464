package acl

// ACL is a token's compiled policies: what its holder may do. A nil *ACL
// means ACLs are disabled and allows everything.
//
// SKELETON: the methods below are the contract the HTTP layers code
// against; Compile and the rule evaluation are being written (helper 1
// replaces this file).
type ACL struct {
	management bool
}

// ManagementACL allows everything (management tokens).
func ManagementACL() *ACL { return &ACL{management: true} }

// IsManagement reports whether the ACL is a management token's.
func (a *ACL) IsManagement() bool { return a == nil || a.management }

// AllowNamespaceOperation reports whether capability (NamespaceCapability…)
// is allowed in namespace ns.
func (a *ACL) AllowNamespaceOperation(ns, capability string) bool { return a.IsManagement() }

// AllowNodeRead and the methods below check the coarse-grained rules.
func (a *ACL) AllowNodeRead() bool     { return a.IsManagement() }
func (a *ACL) AllowNodeWrite() bool    { return a.IsManagement() }
func (a *ACL) AllowAgentRead() bool    { return a.IsManagement() }
func (a *ACL) AllowAgentWrite() bool   { return a.IsManagement() }
func (a *ACL) AllowOperatorRead() bool { return a.IsManagement() }
func (a *ACL) AllowOperatorWrite() bool {
	return a.IsManagement()
}
func (a *ACL) AllowMeshRead() bool                  { return a.IsManagement() }
func (a *ACL) AllowMeshWrite() bool                 { return a.IsManagement() }
func (a *ACL) AllowServiceRead(name string) bool    { return a.IsManagement() }
func (a *ACL) AllowServiceWrite(name string) bool   { return a.IsManagement() }
func (a *ACL) AllowIntentionRead(dest string) bool  { return a.IsManagement() }
func (a *ACL) AllowIntentionWrite(dest string) bool { return a.IsManagement() }

// Namespace capabilities (Nomad's names).
const (
	NamespaceCapabilityDeny           = "deny"
	NamespaceCapabilityListJobs       = "list-jobs"
	NamespaceCapabilityParseJob       = "parse-job"
	NamespaceCapabilityReadJob        = "read-job"
	NamespaceCapabilitySubmitJob      = "submit-job"
	NamespaceCapabilityDispatchJob    = "dispatch-job"
	NamespaceCapabilityReadLogs       = "read-logs"
	NamespaceCapabilityReadFS         = "read-fs"
	NamespaceCapabilityAllocExec      = "alloc-exec"
	NamespaceCapabilityAllocNodeExec  = "alloc-node-exec"
	NamespaceCapabilityAllocLifecycle = "alloc-lifecycle"
	NamespaceCapabilityScaleJob       = "scale-job"
	NamespaceCapabilityReadJobScaling = "read-job-scaling"
)
