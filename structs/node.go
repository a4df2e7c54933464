package structs

import "time"

// Node statuses, as in Nomad. Only a ready node receives new allocations.
const (
	NodeStatusInit         = "initializing"
	NodeStatusReady        = "ready"
	NodeStatusDown         = "down"
	NodeStatusDisconnected = "disconnected"
)

// Node scheduling eligibility, as in Nomad: an ineligible node keeps its
// allocations but receives no new ones.
const (
	NodeSchedulingEligible   = "eligible"
	NodeSchedulingIneligible = "ineligible"
)

// Node is a client node. Field names and JSON shape follow Nomad's
// /v1/node, so the official nomad/api client decodes it.
type Node struct {
	ID         string                 `json:"ID"`
	Name       string                 `json:"Name"`
	Datacenter string                 `json:"Datacenter"`
	NodeClass  string                 `json:"NodeClass,omitempty"`
	Status     string                 `json:"Status"`
	Attributes map[string]string      `json:"Attributes,omitempty"`
	Meta       map[string]string      `json:"Meta,omitempty"`
	Drivers    map[string]*DriverInfo `json:"Drivers,omitempty"`
	HTTPAddr   string                 `json:"HTTPAddr,omitempty"`
	// TLSEnabled says the node's HTTP API serves HTTPS (tls.http).
	TLSEnabled bool `json:"TLSEnabled,omitempty"`
	// SecretID authenticates the node's client to the servers (with its
	// certificate). It is stored by the servers and never served by the
	// HTTP API (see Sanitize).
	SecretID string `json:"SecretID,omitempty"`
	// NodeResources is the node's total capacity; nil (or zero) means
	// unknown, which the scheduler treats as unlimited.
	NodeResources *NodeResources `json:"NodeResources,omitempty"`
	// ReservedResources is the part of NodeResources kept for the OS and
	// the agent; allocations never use it.
	ReservedResources *NodeReservedResources `json:"ReservedResources,omitempty"`
	// SchedulingEligibility is "eligible" or "ineligible"; "" is eligible.
	SchedulingEligibility string `json:"SchedulingEligibility,omitempty"`
	// Drain is true while DrainStrategy is set (Nomad keeps both).
	Drain             bool           `json:"Drain"`
	DrainStrategy     *DrainStrategy `json:"DrainStrategy,omitempty"`
	StatusDescription string         `json:"StatusDescription,omitempty"`
	// StatusUpdatedAt is the last status change (unix seconds, as Nomad).
	StatusUpdatedAt int64  `json:"StatusUpdatedAt,omitempty"`
	CreateIndex     uint64 `json:"CreateIndex"`
	ModifyIndex     uint64 `json:"ModifyIndex"`
}

// Sanitize returns a copy of the node without its secret, for API reads.
func (n *Node) Sanitize() *Node {
	if n == nil {
		return nil
	}
	cp := *n
	cp.SecretID = ""
	return &cp
}

// Ready reports whether the node's status lets it run allocations; an
// empty status (nodes built by older callers) counts as ready.
func (n *Node) Ready() bool {
	return n.Status == "" || n.Status == NodeStatusReady
}

// Eligible reports whether the node accepts new allocations by its
// scheduling eligibility; an empty value counts as eligible.
func (n *Node) Eligible() bool {
	return n.SchedulingEligibility != NodeSchedulingIneligible
}

// Draining reports whether the node is being drained.
func (n *Node) Draining() bool {
	return n.Drain || n.DrainStrategy != nil
}

// NodeResources is a node's total capacity, in Nomad's shape.
type NodeResources struct {
	Cpu    NodeCpuResources    `json:"Cpu"`
	Memory NodeMemoryResources `json:"Memory"`
	Disk   NodeDiskResources   `json:"Disk"`
}

// NodeCpuResources is the node's CPU: CpuShares is the total in MHz
// (cores × clock), TotalCpuCores the number of cores.
type NodeCpuResources struct {
	CpuShares     int64  `json:"CpuShares"`
	TotalCpuCores uint16 `json:"TotalCpuCores,omitempty"`
}

// NodeMemoryResources is the node's total memory.
type NodeMemoryResources struct {
	MemoryMB int64 `json:"MemoryMB"`
}

// NodeDiskResources is the disk available for allocation directories.
type NodeDiskResources struct {
	DiskMB int64 `json:"DiskMB"`
}

// NodeReservedResources is what the node keeps for itself, in Nomad's
// shape (the client's reserved { cpu memory disk reserved_ports } block).
type NodeReservedResources struct {
	Cpu      NodeReservedCpuResources     `json:"Cpu"`
	Memory   NodeReservedMemoryResources  `json:"Memory"`
	Disk     NodeReservedDiskResources    `json:"Disk"`
	Networks NodeReservedNetworkResources `json:"Networks"`
}

// NodeReservedCpuResources is the reserved CPU in MHz.
type NodeReservedCpuResources struct {
	CpuShares uint64 `json:"CpuShares"`
}

// NodeReservedMemoryResources is the reserved memory.
type NodeReservedMemoryResources struct {
	MemoryMB uint64 `json:"MemoryMB"`
}

// NodeReservedDiskResources is the reserved disk.
type NodeReservedDiskResources struct {
	DiskMB uint64 `json:"DiskMB"`
}

// NodeReservedNetworkResources lists reserved host ports ("22,8000-8100").
type NodeReservedNetworkResources struct {
	ReservedHostPorts string `json:"ReservedHostPorts"`
}

// DrainSpec is what the operator asked for when draining a node.
type DrainSpec struct {
	// Deadline is how long after StartedAt the remaining allocations are
	// stopped; -1 stops them at once, 0 means no deadline.
	Deadline         time.Duration `json:"Deadline"`
	IgnoreSystemJobs bool          `json:"IgnoreSystemJobs"`
}

// DrainStrategy is a node's drain in progress. DrainSpec is embedded, so
// its fields appear at the top level of the JSON, as in Nomad.
type DrainStrategy struct {
	DrainSpec
	// ForceDeadline is StartedAt + Deadline (zero when no deadline).
	ForceDeadline time.Time `json:"ForceDeadline"`
	StartedAt     time.Time `json:"StartedAt"`
}

// DriverInfo is a driver's fingerprint on a node.
type DriverInfo struct {
	Detected          bool              `json:"Detected"`
	Healthy           bool              `json:"Healthy"`
	HealthDescription string            `json:"HealthDescription,omitempty"`
	Attributes        map[string]string `json:"Attributes,omitempty"`
	UpdateTime        time.Time         `json:"UpdateTime"`
}
