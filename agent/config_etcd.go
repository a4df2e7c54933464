package agent

import (
	"fmt"
	"net/url"
	"strings"
)

// EtcdConfig says where the server role keeps its state (see
// docs/architecture.md). With no Endpoints the agent embeds a single etcd
// member in <data_dir>/server/etcd that listens on loopback only (ports
// etcd_client and etcd_peer; 0, the default, picks free ones at start):
// nothing outside the process needs it. With Endpoints it uses that
// existing etcd cluster and embeds nothing.
type EtcdConfig struct {
	Endpoints []string
	// CAFile, CertFile and KeyFile authenticate to an external cluster
	// (mutual TLS); all or none.
	CAFile, CertFile, KeyFile string
	// Prefix is the key prefix of meshlet's state (default /meshlet/):
	// several meshlet clusters may share one etcd cluster under different
	// prefixes.
	Prefix string
}

type fileEtcd struct {
	Endpoints []string `hcl:"endpoints,optional"`
	CAFile    *string  `hcl:"ca_file"`
	CertFile  *string  `hcl:"cert_file"`
	KeyFile   *string  `hcl:"key_file"`
	Prefix    *string  `hcl:"prefix"`
}

func (fe *fileEtcd) apply(c *EtcdConfig) {
	if fe == nil {
		return
	}
	c.Endpoints = fe.Endpoints
	set(&c.CAFile, fe.CAFile)
	set(&c.CertFile, fe.CertFile)
	set(&c.KeyFile, fe.KeyFile)
	set(&c.Prefix, fe.Prefix)
}

// DefaultEtcdPrefix is the key prefix of meshlet's state in etcd.
const DefaultEtcdPrefix = "/meshlet/"

func (c *EtcdConfig) problems() []string {
	var out []string
	for _, ep := range c.Endpoints {
		u, err := url.Parse(ep)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			out = append(out, fmt.Sprintf("server.etcd.endpoints: %q is not an http:// or https:// URL", ep))
		}
	}
	set := 0
	for _, f := range []string{c.CAFile, c.CertFile, c.KeyFile} {
		if f != "" {
			set++
		}
	}
	if set != 0 && set != 3 {
		out = append(out, "server.etcd: ca_file, cert_file and key_file go together")
	}
	if set != 0 && len(c.Endpoints) == 0 {
		out = append(out, "server.etcd: ca_file, cert_file and key_file need endpoints (the embedded member has its own)")
	}
	if c.Prefix != "" && (!strings.HasPrefix(c.Prefix, "/") || !strings.HasSuffix(c.Prefix, "/")) {
		out = append(out, fmt.Sprintf("server.etcd.prefix %q must start and end with /", c.Prefix))
	}
	return out
}
