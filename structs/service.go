package structs

import "time"

// Service is a group or task service block.
type Service struct {
	Name        string            `json:"Name"`
	Tags        []string          `json:"Tags,omitempty"`
	PortLabel   string            `json:"PortLabel,omitempty"`
	AddressMode string            `json:"AddressMode,omitempty"`
	Address     string            `json:"Address,omitempty"`
	Checks      []ServiceCheck    `json:"Checks,omitempty"`
	Connect     *ConsulConnect    `json:"Connect,omitempty"`
	Meta        map[string]string `json:"Meta,omitempty"`
	TaskName    string            `json:"TaskName,omitempty"`
	Provider    string            `json:"Provider,omitempty"`
}

// ServiceCheck is a health check; parsed and stored, run by a later issue.
type ServiceCheck struct {
	Name         string        `json:"Name,omitempty"`
	Type         string        `json:"Type"`
	Command      string        `json:"Command,omitempty"`
	Args         []string      `json:"Args,omitempty"`
	Path         string        `json:"Path,omitempty"`
	Protocol     string        `json:"Protocol,omitempty"`
	PortLabel    string        `json:"PortLabel,omitempty"`
	Expose       bool          `json:"Expose,omitempty"`
	AddressMode  string        `json:"AddressMode,omitempty"`
	Interval     time.Duration `json:"Interval"`
	Timeout      time.Duration `json:"Timeout"`
	Method       string        `json:"Method,omitempty"`
	TaskName     string        `json:"TaskName,omitempty"`
	CheckRestart *CheckRestart `json:"CheckRestart,omitempty"`
}

// CheckRestart restarts a task after failed checks (not run yet).
type CheckRestart struct {
	Limit          int            `json:"Limit"`
	Grace          *time.Duration `json:"Grace,omitempty"`
	IgnoreWarnings bool           `json:"IgnoreWarnings"`
}

// ConsulConnect is a service's connect block.
type ConsulConnect struct {
	Native         bool                  `json:"Native"`
	Gateway        *ConsulGateway        `json:"Gateway,omitempty"`
	SidecarService *ConsulSidecarService `json:"SidecarService,omitempty"`
	SidecarTask    *SidecarTask          `json:"SidecarTask,omitempty"`
}

// HasSidecar reports whether the service asks for a sidecar proxy.
func (c *ConsulConnect) HasSidecar() bool { return c != nil && c.SidecarService != nil }

// ConsulGateway is parsed so jobspecs validate; gateways are not run yet.
type ConsulGateway struct {
	Kind   string         `json:"Kind,omitempty"`
	Config map[string]any `json:"Config,omitempty"`
}

// ConsulSidecarService configures the sidecar proxy's service.
type ConsulSidecarService struct {
	Tags                   []string          `json:"Tags,omitempty"`
	Port                   string            `json:"Port,omitempty"`
	Proxy                  *ConsulProxy      `json:"Proxy,omitempty"`
	DisableDefaultTCPCheck bool              `json:"DisableDefaultTCPCheck"`
	Meta                   map[string]string `json:"Meta,omitempty"`
}

// ConsulProxy configures the sidecar proxy.
type ConsulProxy struct {
	LocalServiceAddress string              `json:"LocalServiceAddress,omitempty"`
	LocalServicePort    int                 `json:"LocalServicePort,omitempty"`
	Expose              *ConsulExposeConfig `json:"Expose,omitempty"`
	Upstreams           []*ConsulUpstream   `json:"Upstreams,omitempty"`
	Config              map[string]any      `json:"Config,omitempty"`
}

// ConsulUpstream is one upstream of a sidecar.
type ConsulUpstream struct {
	DestinationName  string             `json:"DestinationName"`
	LocalBindPort    int                `json:"LocalBindPort"`
	LocalBindAddress string             `json:"LocalBindAddress,omitempty"`
	Datacenter       string             `json:"Datacenter,omitempty"`
	MeshGateway      *ConsulMeshGateway `json:"MeshGateway,omitempty"`
	Config           map[string]any     `json:"Config,omitempty"`
}

// ConsulMeshGateway is parsed; mesh gateways are not run yet.
type ConsulMeshGateway struct {
	Mode string `json:"Mode"`
}

// ConsulExposeConfig lists paths exposed through the sidecar.
type ConsulExposeConfig struct {
	Paths []*ConsulExposePath `json:"Paths,omitempty"`
}

// ConsulExposePath is one exposed HTTP path.
type ConsulExposePath struct {
	Path          string `json:"Path"`
	Protocol      string `json:"Protocol,omitempty"`
	LocalPathPort int    `json:"LocalPathPort"`
	ListenerPort  string `json:"ListenerPort"`
}

// SidecarTask overrides the injected proxy task.
type SidecarTask struct {
	Name          string            `json:"Name,omitempty"`
	Driver        string            `json:"Driver,omitempty"`
	User          string            `json:"User,omitempty"`
	Config        map[string]any    `json:"Config,omitempty"`
	Env           map[string]string `json:"Env,omitempty"`
	Resources     *Resources        `json:"Resources,omitempty"`
	Meta          map[string]string `json:"Meta,omitempty"`
	KillTimeout   *time.Duration    `json:"KillTimeout,omitempty"`
	LogConfig     *LogConfig        `json:"LogConfig,omitempty"`
	ShutdownDelay *time.Duration    `json:"ShutdownDelay,omitempty"`
	KillSignal    string            `json:"KillSignal,omitempty"`
}
