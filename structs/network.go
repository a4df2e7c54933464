package structs

// Network modes.
const (
	NetworkModeHost   = "host"
	NetworkModeBridge = "bridge"
	NetworkModeNone   = "none"
	// NetworkModeCNIPrefix prefixes "cni/<name>" modes.
	NetworkModeCNIPrefix = "cni/"
)

// NetworkResource is a group's network block.
type NetworkResource struct {
	Mode          string     `json:"Mode,omitempty"`
	Hostname      string     `json:"Hostname,omitempty"`
	DNS           *DNSConfig `json:"DNS,omitempty"`
	ReservedPorts []Port     `json:"ReservedPorts,omitempty"`
	DynamicPorts  []Port     `json:"DynamicPorts,omitempty"`
}

// DNSConfig of an allocation's namespace.
type DNSConfig struct {
	Servers  []string `json:"Servers,omitempty"`
	Searches []string `json:"Searches,omitempty"`
	Options  []string `json:"Options,omitempty"`
}

// Port is a port label. Value is the host port (static, or assigned for
// dynamic ports); To is the port inside the namespace (0 or -1: same as
// Value).
type Port struct {
	Label string `json:"Label"`
	Value int    `json:"Value"`
	To    int    `json:"To"`
}

// PortMapping is an assigned port of an allocation.
type PortMapping struct {
	Label  string `json:"Label"`
	Value  int    `json:"Value"`
	To     int    `json:"To"`
	HostIP string `json:"HostIP"`
}

// AllocNetworkStatus is what the network hook reports for an allocation.
type AllocNetworkStatus struct {
	InterfaceName string     `json:"InterfaceName"`
	Address       string     `json:"Address"`
	DNS           *DNSConfig `json:"DNS,omitempty"`
}
