package agent

import (
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"

	"github.com/meshlet/meshlet/internal/httpsrv"
	"github.com/meshlet/meshlet/scheduler"
	"github.com/meshlet/meshlet/structs"
)

// ownPorts are the agent's configured listener ports by config key (0:
// picked at start, reserved once known).
func (c *Config) ownPorts() map[string]int {
	return map[string]int{"ports.http": c.Ports.HTTP, "ports.connect_http": c.Ports.ConnectHTTP, "ports.grpc": c.Ports.GRPC}
}

// reservedPortProblems checks the reserved_ports syntax. Reserved ports
// (and the agent's own) may lie inside the dynamic range, as in Nomad: the
// scheduler skips the node's reserved ports when it picks dynamic ones.
func (c *Config) reservedPortProblems() []string {
	if _, err := scheduler.ParsePortSpec(c.Client.ReservedPorts); err != nil {
		return []string{fmt.Sprintf("client.reserved.reserved_ports: %v", err)}
	}
	return nil
}

// reservedPorts is the node's meshlet.reserved_ports attribute: the
// configured reserved_ports plus every port the agent listens on.
func (a *Agent) reservedPorts() string {
	parts := []string{}
	if s := strings.TrimSpace(a.cfg.Client.ReservedPorts); s != "" {
		parts = append(parts, s)
	}
	for _, addr := range []string{a.HTTPAddr(), a.controlPlane.HTTPAddr(), a.controlPlane.GRPCAddr()} {
		if _, port, err := net.SplitHostPort(addr); err == nil {
			parts = append(parts, port)
		}
	}
	for _, p := range a.cfg.ownPorts() {
		if p > 0 {
			parts = append(parts, strconv.Itoa(p))
		}
	}
	parts = append(parts, a.etcdPorts()...)
	return strings.Join(parts, ",")
}

// httpPolicy is the browser guard of both HTTP APIs: the agent's own
// names and addresses plus http_api's allow lists.
func (a *Agent) httpPolicy() httpsrv.Policy {
	hosts := []string{a.cfg.BindAddr, a.cfg.NodeName}
	if h, err := os.Hostname(); err == nil {
		hosts = append(hosts, h)
	}
	hosts = append(hosts, a.cfg.HTTPAPI.AllowedHosts...)
	return httpsrv.Policy{Hosts: hosts, Origins: a.cfg.HTTPAPI.AllowedOrigins, Logger: a.logger.Named("http")}
}

// originProblems checks http_api.allowed_origins.
func (c *Config) originProblems() []string {
	var problems []string
	for _, o := range c.HTTPAPI.AllowedOrigins {
		u, err := url.Parse(o)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
			problems = append(problems, fmt.Sprintf("http_api.allowed_origins %q must be scheme://host[:port]", o))
		}
	}
	return problems
}

// reservedResources is the node's reserved { cpu memory disk reserved_ports }.
func (a *Agent) reservedResources() *structs.NodeReservedResources {
	c := a.cfg.Client
	r := &structs.NodeReservedResources{}
	r.Cpu.CpuShares = uint64(c.ReservedCPU)
	r.Memory.MemoryMB = uint64(c.ReservedMemoryMB)
	r.Disk.DiskMB = uint64(c.ReservedDiskMB)
	r.Networks.ReservedHostPorts = c.ReservedPorts
	return r
}
