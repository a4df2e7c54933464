package agent

import (
	"fmt"
	"net"
	"time"
)

// DefaultRPCPort is the port servers serve client nodes and other
// servers on, as Nomad's.
const DefaultRPCPort = 4647

// ClusterConfig says which roles this agent runs and how it finds the
// others (docs/architecture.md). The default runs both roles in one
// process: a one-node cluster.
type ClusterConfig struct {
	// Server and Client enable the roles (server { enabled }, client {
	// enabled }, or the -server and -client flags).
	Server, Client bool
	// Servers are the RPC addresses (host:port) a client-only agent
	// talks to (client { servers }, -servers).
	Servers []string
	// BootstrapExpect is how many servers the cluster is meant to have
	// (server { bootstrap_expect }); the first server starts the etcd
	// cluster, the others join it, and no leader is elected before that
	// many are members (once: see server.EtcdLeadership.Expect).
	BootstrapExpect int
	// RetryJoin are servers' RPC addresses a new server joins through
	// (server { server_join { retry_join } }, -join).
	RetryJoin []string
	// MinHeartbeatTTL and HeartbeatGrace tune node liveness (server {
	// min_heartbeat_ttl heartbeat_grace }); zero = the server's defaults.
	MinHeartbeatTTL, HeartbeatGrace time.Duration
}

// TLSConfig is the agent's tls block (Nomad's): mutual TLS on the RPC
// port between servers and client nodes (RPC), and HTTPS on the HTTP API
// and the Consul-shaped connect API (HTTP), with client certificates
// required only with VerifyHTTPSClient. Both use the same files.
type TLSConfig struct {
	RPC                  bool
	HTTP                 bool
	CAFile               string
	CertFile             string
	KeyFile              string
	VerifyServerHostname bool
	VerifyHTTPSClient    bool
}

type fileTLS struct {
	RPC                  *bool   `hcl:"rpc"`
	HTTP                 *bool   `hcl:"http"`
	VerifyHTTPSClient    *bool   `hcl:"verify_https_client"`
	CAFile               *string `hcl:"ca_file"`
	CertFile             *string `hcl:"cert_file"`
	KeyFile              *string `hcl:"key_file"`
	VerifyServerHostname *bool   `hcl:"verify_server_hostname"`
}

func (ft *fileTLS) apply(c *TLSConfig) {
	if ft == nil {
		return
	}
	set(&c.RPC, ft.RPC)
	set(&c.HTTP, ft.HTTP)
	set(&c.VerifyHTTPSClient, ft.VerifyHTTPSClient)
	set(&c.CAFile, ft.CAFile)
	set(&c.CertFile, ft.CertFile)
	set(&c.KeyFile, ft.KeyFile)
	set(&c.VerifyServerHostname, ft.VerifyServerHostname)
}

type fileServerJoin struct {
	RetryJoin []string `hcl:"retry_join,optional"`
}

// clusterProblems checks the roles and their addresses.
func (c *Config) clusterProblems() []string {
	var out []string
	cl := c.Cluster
	if !cl.Server && !cl.Client {
		out = append(out, "at least one of the server and client roles must be enabled")
	}
	if cl.Client && !cl.Server && len(cl.Servers) == 0 {
		out = append(out, "a client-only agent needs client.servers (or -servers): the RPC addresses of its servers")
	}
	for _, list := range [][]string{cl.Servers, cl.RetryJoin} {
		for _, addr := range list {
			if _, _, err := net.SplitHostPort(addr); err != nil {
				out = append(out, fmt.Sprintf("server address %q is not host:port", addr))
			}
		}
	}
	if cl.BootstrapExpect < 0 || cl.MinHeartbeatTTL < 0 || cl.HeartbeatGrace < 0 {
		out = append(out, "server.bootstrap_expect, min_heartbeat_ttl and heartbeat_grace must not be negative")
	}
	if c.Ports.RPC < 0 || c.Ports.RPC > 65535 {
		out = append(out, fmt.Sprintf("ports.rpc %d is out of range 0-65535", c.Ports.RPC))
	}
	if t := c.TLS; t.RPC && (t.CAFile == "" || t.CertFile == "" || t.KeyFile == "") {
		out = append(out, "tls.rpc needs ca_file, cert_file and key_file")
	}
	if t := c.TLS; t.HTTP && (t.CAFile == "" || t.CertFile == "" || t.KeyFile == "") {
		out = append(out, "tls.http needs ca_file, cert_file and key_file")
	}
	if t := c.TLS; t.VerifyHTTPSClient && !t.HTTP {
		out = append(out, "tls.verify_https_client needs tls.http = true")
	}
	return out
}

// clustered reports whether this server runs with others (joins, or
// expects more than one server): its etcd member then listens on
// bind_addr at the etcd ports instead of loopback.
func (c *Config) clustered() bool {
	return c.Cluster.Server && (len(c.Cluster.RetryJoin) > 0 || c.Cluster.BootstrapExpect > 1)
}

// applyCluster copies the roles and join settings of the server and
// client blocks over c.
func (fc *fileConfig) applyCluster(c *ClusterConfig) error {
	if fs := fc.Server; fs != nil {
		set(&c.Server, fs.Enabled)
		set(&c.BootstrapExpect, fs.BootstrapExpect)
		if fs.ServerJoin != nil {
			c.RetryJoin = fs.ServerJoin.RetryJoin
		}
		if err := setDurations("server",
			durationField{"min_heartbeat_ttl", fs.MinHeartbeatTTL, &c.MinHeartbeatTTL},
			durationField{"heartbeat_grace", fs.HeartbeatGrace, &c.HeartbeatGrace}); err != nil {
			return err
		}
	}
	if cl := fc.Client; cl != nil {
		set(&c.Client, cl.Enabled)
		if cl.Servers != nil {
			c.Servers = cl.Servers
		}
	}
	return nil
}
