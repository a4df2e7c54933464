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
	// TaggedAddresses are Nomad's tagged_addresses: name to "ip" or
	// "ip:port" (a mesh gateway's lan and wan; see connect).
	TaggedAddresses map[string]string `json:"TaggedAddresses,omitempty"`
	TaskName        string            `json:"TaskName,omitempty"`
	Provider        string            `json:"Provider,omitempty"`
	// CheckRestart is a service-level check_restart as a JSON job carries
	// it (Nomad's api.Service): Canonicalize merges it into each check's
	// and clears it (the HCL parser merges it while decoding).
	CheckRestart *CheckRestart `json:"CheckRestart,omitempty"`
}

// ServiceCheck is a service health check, with the fields and JSON names of
// Nomad's api.ServiceCheck. The client agent runs http, tcp, grpc and
// script checks (client/checks) and restarts tasks per CheckRestart.
type ServiceCheck struct {
	Name        string   `json:"Name,omitempty"`
	Type        string   `json:"Type"`
	Command     string   `json:"Command,omitempty"`
	Args        []string `json:"Args,omitempty"`
	Path        string   `json:"Path,omitempty"`
	Protocol    string   `json:"Protocol,omitempty"`
	PortLabel   string   `json:"PortLabel,omitempty"`
	Expose      bool     `json:"Expose,omitempty"`
	AddressMode string   `json:"AddressMode,omitempty"`
	// Interval and Timeout are at least 1s once validated.
	Interval time.Duration `json:"Interval"`
	Timeout  time.Duration `json:"Timeout"`
	// InitialStatus is "passing", "warning", "critical" or "" (critical).
	InitialStatus string `json:"InitialStatus,omitempty"`
	Notes         string `json:"Notes,omitempty"`
	TLSServerName string `json:"TLSServerName,omitempty"`
	TLSSkipVerify bool   `json:"TLSSkipVerify,omitempty"`
	// Header, Method and Body are for http checks.
	Header       map[string][]string `json:"Header,omitempty"`
	Method       string              `json:"Method,omitempty"`
	Body         string              `json:"Body,omitempty"`
	CheckRestart *CheckRestart       `json:"CheckRestart,omitempty"`
	// GRPCService and GRPCUseTLS are for grpc checks.
	GRPCService string `json:"GRPCService,omitempty"`
	GRPCUseTLS  bool   `json:"GRPCUseTLS,omitempty"`
	TaskName    string `json:"TaskName,omitempty"`
	// SuccessBeforePassing and FailuresBeforeCritical (and Warning) are
	// how many consecutive results flip the status; 0 means the first.
	SuccessBeforePassing   int `json:"SuccessBeforePassing,omitempty"`
	FailuresBeforeCritical int `json:"FailuresBeforeCritical,omitempty"`
	FailuresBeforeWarning  int `json:"FailuresBeforeWarning,omitempty"`
	// OnUpdate is "require_healthy" (also ""), "ignore_warnings" or
	// "ignore": how the check's status counts during a deployment.
	OnUpdate string `json:"OnUpdate,omitempty"`
}

// CheckRestart restarts a task after Limit consecutive unhealthy results
// of a check, not counting the Grace after the task (re)starts; the
// client agent applies it (client/checks).
type CheckRestart struct {
	Limit          int            `json:"Limit"`
	Grace          *time.Duration `json:"Grace,omitempty"`
	IgnoreWarnings bool           `json:"IgnoreWarnings"`
}

// Merge returns svc (a service-level check_restart) merged into own (a
// check's; nil when it has none), field by field as Nomad's
// CheckRestart.Merge: own's limit wins when above 0, its grace when set,
// its ignore_warnings when true.
func (svc *CheckRestart) Merge(own *CheckRestart) *CheckRestart {
	merged := *svc
	if own == nil {
		return &merged
	}
	if own.Limit > 0 {
		merged.Limit = own.Limit
	}
	if own.Grace != nil {
		merged.Grace = own.Grace
	}
	merged.IgnoreWarnings = merged.IgnoreWarnings || own.IgnoreWarnings
	return &merged
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

// ConsulGateway is a service's connect gateway block. Kind is "ingress",
// "terminating" or "mesh"; Config keeps the block free-form. All three
// kinds run (Proxy, Ingress, Terminating and Mesh are typed, in the shape
// of Nomad's api.ConsulGateway).
//
// Proxy, Ingress, Terminating and Mesh carry Nomad's /v1 JSON names, so a
// job submitted through the Nomad API (which has no Kind or Config) keeps
// its gateway.
type ConsulGateway struct {
	Kind        string                        `json:"Kind,omitempty"`
	Config      map[string]any                `json:"Config,omitempty"`
	Proxy       *ConsulGatewayProxy           `json:"Proxy,omitempty"`
	Ingress     *ConsulIngressConfigEntry     `json:"Ingress,omitempty"`
	Terminating *ConsulTerminatingConfigEntry `json:"Terminating,omitempty"`
	Mesh        *ConsulMeshConfigEntry        `json:"Mesh,omitempty"`
}

// ConsulMeshConfigEntry is a mesh gateway's block, which has no settings
// (Nomad's api.ConsulMeshConfigEntry). A pointer, so that an empty
// `mesh {}` survives JSON.
type ConsulMeshConfigEntry struct{}

// Kinds lists the gateway kinds the block sets (one, once valid).
func (g *ConsulGateway) Kinds() []string {
	var out []string
	if g.Ingress != nil {
		out = append(out, GatewayKindIngress)
	}
	if g.Terminating != nil {
		out = append(out, GatewayKindTerminating)
	}
	if g.Mesh != nil {
		out = append(out, GatewayKindMesh)
	}
	return out
}

// Gateway kinds of a ConsulGateway.
const (
	GatewayKindIngress     = "ingress"
	GatewayKindTerminating = "terminating"
	GatewayKindMesh        = "mesh"
)

// IsIngress reports whether the connect block is an ingress gateway.
func (c *ConsulConnect) IsIngress() bool {
	return c != nil && c.Gateway != nil && c.Gateway.Ingress != nil
}

// IsTerminating reports whether the connect block is a terminating gateway.
func (c *ConsulConnect) IsTerminating() bool {
	return c != nil && c.Gateway != nil && c.Gateway.Terminating != nil
}

// IsMesh reports whether the connect block is a mesh gateway.
func (c *ConsulConnect) IsMesh() bool {
	return c != nil && c.Gateway != nil && c.Gateway.Mesh != nil
}

// IsGateway reports whether the connect block is a gateway meshlet runs
// (ingress, terminating or mesh).
func (c *ConsulConnect) IsGateway() bool { return c.IsIngress() || c.IsTerminating() || c.IsMesh() }

// ConsulTerminatingConfigEntry is a terminating gateway's terminating
// block, the shape of Consul's terminating-gateway config entry: the
// services outside the mesh the gateway acts for.
type ConsulTerminatingConfigEntry struct {
	Services []*ConsulLinkedService `json:"Services,omitempty"`
}

// ConsulLinkedService is a service a terminating gateway links to the
// mesh, with the TLS the gateway originates to it (files on the node or
// in the gateway's task directory; SNI sent to it).
type ConsulLinkedService struct {
	Name     string `json:"Name"`
	CAFile   string `json:"CAFile,omitempty"`
	CertFile string `json:"CertFile,omitempty"`
	KeyFile  string `json:"KeyFile,omitempty"`
	SNI      string `json:"SNI,omitempty"`
}

// ConsulGatewayProxy is a gateway's proxy block (Nomad's
// api.ConsulGatewayProxy): the gateway's connect timeout, where its
// listeners bind, how it resolves hostnames, and free-form proxy config.
type ConsulGatewayProxy struct {
	ConnectTimeout                  *time.Duration                       `json:"ConnectTimeout,omitempty"`
	EnvoyGatewayBindTaggedAddresses bool                                 `json:"EnvoyGatewayBindTaggedAddresses,omitempty"`
	EnvoyGatewayBindAddresses       map[string]*ConsulGatewayBindAddress `json:"EnvoyGatewayBindAddresses,omitempty"`
	EnvoyGatewayNoDefaultBind       bool                                 `json:"EnvoyGatewayNoDefaultBind,omitempty"`
	EnvoyDNSDiscoveryType           string                               `json:"EnvoyDNSDiscoveryType,omitempty"`
	Config                          map[string]any                       `json:"Config,omitempty"`
}

// ConsulGatewayBindAddress is one envoy_gateway_bind_addresses block.
type ConsulGatewayBindAddress struct {
	Name    string `json:"Name,omitempty"`
	Address string `json:"Address"`
	Port    int    `json:"Port"`
}

// ConsulIngressConfigEntry is an ingress gateway's ingress block, the
// shape of Consul's ingress-gateway config entry.
type ConsulIngressConfigEntry struct {
	TLS       *ConsulGatewayTLSConfig  `json:"TLS,omitempty"`
	Listeners []*ConsulIngressListener `json:"Listeners,omitempty"`
}

// ConsulGatewayTLSConfig is an ingress gateway's (or listener's) tls
// block.
type ConsulGatewayTLSConfig struct {
	Enabled       bool                       `json:"Enabled"`
	TLSMinVersion string                     `json:"TLSMinVersion,omitempty"`
	TLSMaxVersion string                     `json:"TLSMaxVersion,omitempty"`
	CipherSuites  []string                   `json:"CipherSuites,omitempty"`
	SDS           *ConsulGatewayTLSSDSConfig `json:"SDS,omitempty"`
}

// ConsulGatewayTLSSDSConfig names a certificate an external SDS cluster
// (defined in the proxy's bootstrap) serves.
type ConsulGatewayTLSSDSConfig struct {
	ClusterName  string `json:"ClusterName,omitempty"`
	CertResource string `json:"CertResource,omitempty"`
}

// ConsulIngressListener is one listener of an ingress gateway.
type ConsulIngressListener struct {
	Port     int                     `json:"Port"`
	Protocol string                  `json:"Protocol"`
	Services []*ConsulIngressService `json:"Services,omitempty"`
}

// ConsulIngressService is a service an ingress listener routes to.
type ConsulIngressService struct {
	Name  string   `json:"Name"`
	Hosts []string `json:"Hosts,omitempty"`
	// TLS: the service's own certificate from SDS (its sds block only).
	TLS *ConsulGatewayTLSConfig `json:"TLS,omitempty"`
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
	// TransparentProxy is parsed and validated as Nomad does; meshlet
	// does not redirect traffic through the sidecar yet.
	TransparentProxy *ConsulTransparentProxy `json:"TransparentProxy,omitempty"`
}

// ConsulTransparentProxy is Nomad's transparent_proxy block (JSON names
// as in Nomad's API).
type ConsulTransparentProxy struct {
	UID                  string   `json:"UID,omitempty"`
	OutboundPort         int      `json:"OutboundPort,omitempty"`
	ExcludeInboundPorts  []string `json:"ExcludeInboundPorts,omitempty"`
	ExcludeOutboundPorts []int    `json:"ExcludeOutboundPorts,omitempty"`
	ExcludeOutboundCIDRs []string `json:"ExcludeOutboundCIDRs,omitempty"`
	ExcludeUIDs          []string `json:"ExcludeUIDs,omitempty"`
	NoDNS                bool     `json:"NoDNS,omitempty"`
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

// ConsulMeshGateway is an upstream's mesh_gateway block: how a sidecar
// reaches an upstream in another datacenter ("local", "remote", "none";
// "" leaves it to the config entries).
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
