package acl

import (
	"fmt"
	"sort"
	"strings"
)

// ACL is a token's compiled policies: what its holder may do. Everything
// not granted is denied. A nil *ACL means ACLs are disabled and allows
// everything. An ACL is immutable once compiled, so safe to share.
type ACL struct {
	management bool

	namespaces  labelRules
	hostVolumes labelRules

	node, agent, operator, quota, plugin access
	mesh                                 access
	meshSet                              bool // some policy has a mesh rule

	services        map[string]serviceAccess
	servicePrefixes map[string]serviceAccess
	prefixOrder     []string // keys of servicePrefixes, longest first
}

// serviceAccess is a service or service_prefix rule after merging: its
// service disposition and its intentions disposition.
type serviceAccess struct {
	policy     access
	intentions access
}

// ManagementACL allows everything (management tokens).
func ManagementACL() *ACL { return &ACL{management: true} }

// NewACL compiles the policies of a token: a management token gets
// ManagementACL, a client token the merge of its policies' rules. A
// policy whose rules do not parse fails it with an error wrapping
// ErrInvalid.
func NewACL(management bool, policies []*Policy) (*ACL, error) {
	if management {
		return ManagementACL(), nil
	}
	rules := make([]*PolicyRules, 0, len(policies))
	for _, p := range policies {
		if p == nil {
			continue
		}
		r, err := Parse(p.Rules)
		if err != nil {
			return nil, fmt.Errorf("failed to parse policy %q: %w", p.Name, err)
		}
		rules = append(rules, r)
	}
	return Compile(rules...), nil
}

// Compile merges parsed policies into an ACL (nil entries are skipped;
// none at all denies everything). The merge follows Nomad and Consul:
//   - namespace and host_volume rules with the same label are unioned,
//     and a deny (policy or capability) in any of them wins;
//   - coarse rules (node, agent, operator, quota, plugin, mesh): deny
//     wins, else the most permissive;
//   - service and service_prefix rules with the same name: deny wins,
//     else the most permissive, separately for policy and intentions.
func Compile(rules ...*PolicyRules) *ACL {
	a := &ACL{
		services:        map[string]serviceAccess{},
		servicePrefixes: map[string]serviceAccess{},
	}
	for _, r := range rules {
		if r != nil {
			a.add(r)
		}
	}
	a.namespaces.finish()
	a.hostVolumes.finish()
	for p := range a.servicePrefixes {
		a.prefixOrder = append(a.prefixOrder, p)
	}
	sort.Slice(a.prefixOrder, func(i, j int) bool { return len(a.prefixOrder[i]) > len(a.prefixOrder[j]) })
	return a
}

// add merges one policy's rules into a.
func (a *ACL) add(r *PolicyRules) {
	for _, ns := range r.Namespaces {
		caps := capSet{}
		caps.add(expandNamespacePolicy(ns.Policy)...)
		caps.add(ns.Capabilities...)
		a.namespaces.add(ns.Name, caps)
	}
	for _, hv := range r.HostVolumes {
		caps := capSet{}
		caps.add(expandHostVolumePolicy(hv.Policy)...)
		caps.add(hv.Capabilities...)
		a.hostVolumes.add(hv.Name, caps)
	}
	a.node = a.node.merge(parseAccess(r.Node))
	a.agent = a.agent.merge(parseAccess(r.Agent))
	a.operator = a.operator.merge(parseAccess(r.Operator))
	a.quota = a.quota.merge(parseAccess(r.Quota))
	a.plugin = a.plugin.merge(parseAccess(r.Plugin))
	if r.Mesh != "" {
		a.mesh = a.mesh.merge(parseAccess(r.Mesh))
		a.meshSet = true
	}
	mergeServices(a.services, r.Services)
	mergeServices(a.servicePrefixes, r.ServicePrefixes)
}

// mergeServices merges rules into m, applying Consul's implied
// intentions to each rule first: "Consul implicitly grants
// intentions:read permissions to destination services when they are
// configured with service:read or service:write permissions" (Consul,
// "Create and manage intentions", ACL requirements:
// https://developer.hashicorp.com/consul/docs/secure-mesh/intention/create);
// a deny rule without intentions denies them (Consul's policy
// authorizer). Consul applies this after merging the raw values; applying
// it per rule, before the merge, lets a service deny in one policy also
// deny the intentions another policy grants on the same name.
func mergeServices(m map[string]serviceAccess, rules []*ServiceRule) {
	for _, r := range rules {
		sa := serviceAccess{policy: parseAccess(r.Policy), intentions: parseAccess(r.Intentions)}
		if r.Intentions == "" {
			sa.intentions = accessDeny
			if sa.policy == accessRead || sa.policy == accessWrite {
				sa.intentions = accessRead
			}
		}
		if old, ok := m[r.Name]; ok {
			sa.policy = old.policy.merge(sa.policy)
			sa.intentions = old.intentions.merge(sa.intentions)
		}
		m[r.Name] = sa
	}
}

// IsManagement reports whether the ACL is a management token's.
func (a *ACL) IsManagement() bool { return a == nil || a.management }

// AllowNamespaceOperation reports whether capability (NamespaceCapability…)
// is allowed in namespace ns ("" is "default"). The rule is the exact
// namespace rule if there is one, else the closest glob (see lookup).
func (a *ACL) AllowNamespaceOperation(ns, capability string) bool {
	if a.IsManagement() {
		return true
	}
	return a.namespaces.lookup(namespaceOrDefault(ns)).allows(capability)
}

// AllowNamespace reports whether any capability is allowed in ns: what
// listing namespaces filters on.
func (a *ACL) AllowNamespace(ns string) bool {
	if a.IsManagement() {
		return true
	}
	return a.namespaces.lookup(namespaceOrDefault(ns)).any()
}

// AllowHostVolumeOperation reports whether capability
// (HostVolumeCapability…) is allowed on host volume name.
func (a *ACL) AllowHostVolumeOperation(name, capability string) bool {
	if a.IsManagement() {
		return true
	}
	return a.hostVolumes.lookup(name).allows(capability)
}

// AllowHostVolume reports whether any capability is allowed on name.
func (a *ACL) AllowHostVolume(name string) bool {
	if a.IsManagement() {
		return true
	}
	return a.hostVolumes.lookup(name).any()
}

func namespaceOrDefault(ns string) string {
	if ns == "" {
		return "default"
	}
	return ns
}

// allow is the check behind the coarse rules.
func (a *ACL) allow(level func(*ACL) access, need access) bool {
	return a.IsManagement() || level(a).allows(need)
}

func nodeLevel(a *ACL) access     { return a.node }
func agentLevel(a *ACL) access    { return a.agent }
func operatorLevel(a *ACL) access { return a.operator }
func quotaLevel(a *ACL) access    { return a.quota }
func pluginLevel(a *ACL) access   { return a.plugin }

// meshLevel is the mesh rule, or the operator rule when no policy sets
// mesh: Consul's MeshRead/MeshWrite "default to OperatorRead/Write"
// (hashicorp/consul acl/policy_authorizer.go).
func meshLevel(a *ACL) access {
	if a.meshSet {
		return a.mesh
	}
	return a.operator
}

// AllowNodeRead reports whether the node rule allows reading.
func (a *ACL) AllowNodeRead() bool { return a.allow(nodeLevel, accessRead) }

// AllowNodeWrite reports whether the node rule allows writing.
func (a *ACL) AllowNodeWrite() bool { return a.allow(nodeLevel, accessWrite) }

// AllowAgentRead reports whether the agent rule allows reading.
func (a *ACL) AllowAgentRead() bool { return a.allow(agentLevel, accessRead) }

// AllowAgentWrite reports whether the agent rule allows writing.
func (a *ACL) AllowAgentWrite() bool { return a.allow(agentLevel, accessWrite) }

// AllowOperatorRead reports whether the operator rule allows reading.
func (a *ACL) AllowOperatorRead() bool { return a.allow(operatorLevel, accessRead) }

// AllowOperatorWrite reports whether the operator rule allows writing.
func (a *ACL) AllowOperatorWrite() bool { return a.allow(operatorLevel, accessWrite) }

// AllowQuotaRead reports whether the quota rule allows reading.
func (a *ACL) AllowQuotaRead() bool { return a.allow(quotaLevel, accessRead) }

// AllowQuotaWrite reports whether the quota rule allows writing.
func (a *ACL) AllowQuotaWrite() bool { return a.allow(quotaLevel, accessWrite) }

// AllowPluginList reports whether the plugin rule allows listing
// (list, read or write).
func (a *ACL) AllowPluginList() bool { return a.allow(pluginLevel, accessList) }

// AllowPluginRead reports whether the plugin rule allows reading
// (read or write).
func (a *ACL) AllowPluginRead() bool { return a.allow(pluginLevel, accessRead) }

// AllowMeshRead reports whether the mesh rule (else operator) allows
// reading.
func (a *ACL) AllowMeshRead() bool { return a.allow(meshLevel, accessRead) }

// AllowMeshWrite reports whether the mesh rule (else operator) allows
// writing.
func (a *ACL) AllowMeshWrite() bool { return a.allow(meshLevel, accessWrite) }

// service returns the rule for service name: an exact service rule,
// else the longest matching service_prefix ("" matches every name).
// Consul: "the most specific prefix match determines the action ...
// Exact matching rules will only apply to the exact resource specified"
// (https://developer.hashicorp.com/consul/docs/security/acl/acl-rules),
// and its authorizer checks the exact rule before any prefix.
func (a *ACL) service(name string) (serviceAccess, bool) {
	if sa, ok := a.services[name]; ok {
		return sa, true
	}
	for _, p := range a.prefixOrder {
		if strings.HasPrefix(name, p) {
			return a.servicePrefixes[p], true
		}
	}
	return serviceAccess{}, false
}

// AllowServiceRead reports whether service name may be read.
func (a *ACL) AllowServiceRead(name string) bool {
	if a.IsManagement() {
		return true
	}
	sa, _ := a.service(name)
	return sa.policy.allows(accessRead)
}

// AllowServiceWrite reports whether service name may be registered or
// changed.
func (a *ACL) AllowServiceWrite(name string) bool {
	if a.IsManagement() {
		return true
	}
	sa, _ := a.service(name)
	return sa.policy.allows(accessWrite)
}

// AllowIntentionRead reports whether intentions whose destination is
// dest may be read. Consul grants it by the service rule of the
// destination; for dest "*" any rule granting intentions read suffices
// (Consul's IntentionRead("*") is "any allowed").
func (a *ACL) AllowIntentionRead(dest string) bool {
	if a.IsManagement() {
		return true
	}
	if dest == "*" {
		return a.anyIntentions(func(l access) bool { return l.allows(accessRead) })
	}
	sa, _ := a.service(dest)
	return sa.intentions.allows(accessRead)
}

// AllowIntentionWrite reports whether intentions whose destination is
// dest may be written: the destination's service rule must say
// intentions = "write" (policy alone never implies it). For dest "*"
// Consul requires write on everything: a service_prefix "" granting it
// and no rule that does not ("all allowed").
func (a *ACL) AllowIntentionWrite(dest string) bool {
	if a.IsManagement() {
		return true
	}
	if dest == "*" {
		all, ok := a.servicePrefixes[""]
		return ok && all.intentions.allows(accessWrite) &&
			!a.anyIntentions(func(l access) bool { return !l.allows(accessWrite) })
	}
	sa, _ := a.service(dest)
	return sa.intentions.allows(accessWrite)
}

// anyIntentions reports whether some service or service_prefix rule's
// intentions level satisfies f.
func (a *ACL) anyIntentions(f func(access) bool) bool {
	for _, m := range []map[string]serviceAccess{a.services, a.servicePrefixes} {
		for _, sa := range m {
			if f(sa.intentions) {
				return true
			}
		}
	}
	return false
}
