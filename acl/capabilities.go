package acl

import "slices"

// Policy dispositions. Nomad's namespace rules also take PolicyScale and
// its plugin rule PolicyList.
const (
	PolicyDeny  = "deny"
	PolicyRead  = "read"
	PolicyWrite = "write"
	PolicyScale = "scale"
	PolicyList  = "list"
)

// Namespace capabilities (Nomad's names). The first block is the method
// set's contract; the second completes Nomad's documented list, "Namespace
// rules" in https://developer.hashicorp.com/nomad/docs/other-specifications/acl-policy
// (submit-recommendation is Nomad Enterprise's).
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

	NamespaceCapabilityCSIRegisterPlugin    = "csi-register-plugin"
	NamespaceCapabilityCSIWriteVolume       = "csi-write-volume"
	NamespaceCapabilityCSIReadVolume        = "csi-read-volume"
	NamespaceCapabilityCSIListVolume        = "csi-list-volume"
	NamespaceCapabilityCSIMountVolume       = "csi-mount-volume"
	NamespaceCapabilityListScalingPolicies  = "list-scaling-policies"
	NamespaceCapabilityReadScalingPolicy    = "read-scaling-policy"
	NamespaceCapabilitySentinelOverride     = "sentinel-override"
	NamespaceCapabilitySubmitRecommendation = "submit-recommendation"
)

// Host volume capabilities (Nomad's "Host Volume rules").
const (
	HostVolumeCapabilityDeny           = "deny"
	HostVolumeCapabilityMountReadOnly  = "mount-readonly"
	HostVolumeCapabilityMountReadWrite = "mount-readwrite"
)

// namespaceCapabilities is every capability a namespace rule may list.
var namespaceCapabilities = []string{
	NamespaceCapabilityDeny, NamespaceCapabilityListJobs, NamespaceCapabilityParseJob,
	NamespaceCapabilityReadJob, NamespaceCapabilitySubmitJob, NamespaceCapabilityDispatchJob,
	NamespaceCapabilityReadLogs, NamespaceCapabilityReadFS, NamespaceCapabilityAllocExec,
	NamespaceCapabilityAllocNodeExec, NamespaceCapabilityAllocLifecycle,
	NamespaceCapabilityScaleJob, NamespaceCapabilityReadJobScaling,
	NamespaceCapabilityCSIRegisterPlugin, NamespaceCapabilityCSIWriteVolume,
	NamespaceCapabilityCSIReadVolume, NamespaceCapabilityCSIListVolume,
	NamespaceCapabilityCSIMountVolume, NamespaceCapabilityListScalingPolicies,
	NamespaceCapabilityReadScalingPolicy, NamespaceCapabilitySentinelOverride,
	NamespaceCapabilitySubmitRecommendation,
}

// hostVolumeCapabilities is every capability a host_volume rule may list.
var hostVolumeCapabilities = []string{
	HostVolumeCapabilityDeny, HostVolumeCapabilityMountReadOnly, HostVolumeCapabilityMountReadWrite,
}

// expandNamespacePolicy is Nomad's documented shorthand table ("The
// coarse-grained policy permissions are shorthand for the following
// fine-grained namespace capabilities"). Capabilities the listed ones
// imply (csi-list-volume under write, say) are added by impliedCapabilities.
func expandNamespacePolicy(policy string) []string {
	switch policy {
	case PolicyDeny:
		return []string{NamespaceCapabilityDeny}
	case PolicyRead:
		return []string{
			NamespaceCapabilityListJobs, NamespaceCapabilityParseJob, NamespaceCapabilityReadJob,
			NamespaceCapabilityCSIListVolume, NamespaceCapabilityCSIReadVolume,
			NamespaceCapabilityListScalingPolicies, NamespaceCapabilityReadScalingPolicy,
			NamespaceCapabilityReadJobScaling,
		}
	case PolicyWrite:
		return []string{
			NamespaceCapabilityListJobs, NamespaceCapabilityParseJob, NamespaceCapabilityReadJob,
			NamespaceCapabilitySubmitJob, NamespaceCapabilityDispatchJob, NamespaceCapabilityReadLogs,
			NamespaceCapabilityReadFS, NamespaceCapabilityAllocExec, NamespaceCapabilityAllocLifecycle,
			NamespaceCapabilityCSIWriteVolume, NamespaceCapabilityCSIMountVolume,
			NamespaceCapabilityListScalingPolicies, NamespaceCapabilityReadScalingPolicy,
			NamespaceCapabilityReadJobScaling, NamespaceCapabilityScaleJob,
		}
	case PolicyScale:
		return []string{
			NamespaceCapabilityListScalingPolicies, NamespaceCapabilityReadScalingPolicy,
			NamespaceCapabilityReadJobScaling, NamespaceCapabilityScaleJob,
		}
	}
	return nil
}

// expandHostVolumePolicy is Nomad's host volume shorthand table: read is
// mount-readonly, write adds mount-readwrite.
func expandHostVolumePolicy(policy string) []string {
	switch policy {
	case PolicyDeny:
		return []string{HostVolumeCapabilityDeny}
	case PolicyRead:
		return []string{HostVolumeCapabilityMountReadOnly}
	case PolicyWrite:
		return []string{HostVolumeCapabilityMountReadOnly, HostVolumeCapabilityMountReadWrite}
	}
	return nil
}

// impliedCapabilities is what Nomad documents one capability to grant
// implicitly: list-jobs grants csi-list-volume, read-job csi-read-volume,
// read-fs read-logs, csi-write-volume and csi-mount-volume grant
// csi-read-volume, which grants csi-list-volume; and mount-readwrite
// "allow[s] the user to mount the volume as readonly or readwrite".
var impliedCapabilities = map[string][]string{
	NamespaceCapabilityListJobs:        {NamespaceCapabilityCSIListVolume},
	NamespaceCapabilityReadJob:         {NamespaceCapabilityCSIReadVolume},
	NamespaceCapabilityReadFS:          {NamespaceCapabilityReadLogs},
	NamespaceCapabilityCSIWriteVolume:  {NamespaceCapabilityCSIReadVolume},
	NamespaceCapabilityCSIMountVolume:  {NamespaceCapabilityCSIReadVolume},
	NamespaceCapabilityCSIReadVolume:   {NamespaceCapabilityCSIListVolume},
	HostVolumeCapabilityMountReadWrite: {HostVolumeCapabilityMountReadOnly},
}

// capSet is a set of capabilities. One holding the deny capability
// allows nothing, whatever else it holds: Nomad's "deny will take
// precedence and prevent any capabilities".
type capSet map[string]struct{}

// add puts caps and, transitively, what they imply into s.
func (s capSet) add(caps ...string) {
	for _, c := range caps {
		if _, ok := s[c]; ok {
			continue
		}
		s[c] = struct{}{}
		s.add(impliedCapabilities[c]...)
	}
}

// allows reports whether s grants capability c.
func (s capSet) allows(c string) bool {
	if _, denied := s[NamespaceCapabilityDeny]; denied {
		return false
	}
	_, ok := s[c]
	return ok
}

// any reports whether s grants at least one capability.
func (s capSet) any() bool {
	_, denied := s[NamespaceCapabilityDeny]
	return !denied && len(s) > 0
}

// access is a coarse disposition, ordered from least to most permissive;
// accessDeny is apart: it wins every merge.
type access uint8

const (
	accessNone access = iota // no rule: default deny
	accessList
	accessRead
	accessWrite
	accessDeny
)

// parseAccess maps a disposition to its access level; "scale" is not
// one (namespace rules only).
func parseAccess(policy string) access {
	switch policy {
	case PolicyList:
		return accessList
	case PolicyRead:
		return accessRead
	case PolicyWrite:
		return accessWrite
	case PolicyDeny:
		return accessDeny
	}
	return accessNone
}

// merge combines two policies' levels for the same rule: deny wins, else
// the most permissive.
func (a access) merge(b access) access {
	if a == accessDeny || b == accessDeny {
		return accessDeny
	}
	return max(a, b)
}

// allows reports whether level a grants need.
func (a access) allows(need access) bool {
	return a != accessDeny && a >= need
}

// validIn reports whether v is one of allowed.
func validIn(v string, allowed ...string) bool { return slices.Contains(allowed, v) }
