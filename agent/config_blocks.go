package agent

import (
	"fmt"
	"time"

	"github.com/hashicorp/hcl/v2"

	"github.com/meshlet/meshlet/jobspecs"
	"github.com/meshlet/meshlet/structs"
)

// ServerConfig bounds the server role's state (Nomad's server block where
// Nomad has the knob). Zero values mean the server's defaults.
type ServerConfig struct {
	// JobTrackedVersions is how many versions of each job are kept
	// (Nomad's job_tracked_versions; default 6).
	JobTrackedVersions int
	// JobMaxCount caps a job's allocations, JobMaxSize its JSON-encoded
	// size in bytes (defaults 10,000 and 4 MiB); negative = no limit.
	JobMaxCount int
	JobMaxSize  int
	// EvalGCThreshold (Nomad's eval_gc_threshold), AllocGCThreshold,
	// NodeGCThreshold and GCInterval govern what the server collects
	// (defaults 1h, 1h, 24h, 5m).
	EvalGCThreshold  time.Duration
	AllocGCThreshold time.Duration
	NodeGCThreshold  time.Duration
	GCInterval       time.Duration
	// Etcd is where the state lives: an embedded member by default.
	Etcd EtcdConfig
}

type fileServer struct {
	JobTrackedVersions *int            `hcl:"job_tracked_versions"`
	JobMaxCount        *int            `hcl:"job_max_count"`
	JobMaxSize         *int            `hcl:"job_max_size"`
	EvalGCThreshold    *hcl.Attribute  `hcl:"eval_gc_threshold"`
	AllocGCThreshold   *hcl.Attribute  `hcl:"alloc_gc_threshold"`
	NodeGCThreshold    *hcl.Attribute  `hcl:"node_gc_threshold"`
	GCInterval         *hcl.Attribute  `hcl:"gc_interval"`
	Etcd               *fileEtcd       `hcl:"etcd,block"`
	Enabled            *bool           `hcl:"enabled"`
	BootstrapExpect    *int            `hcl:"bootstrap_expect"`
	ServerJoin         *fileServerJoin `hcl:"server_join,block"`
	MinHeartbeatTTL    *hcl.Attribute  `hcl:"min_heartbeat_ttl"`
	HeartbeatGrace     *hcl.Attribute  `hcl:"heartbeat_grace"`
}

// apply copies the file's server block over c.
func (fs *fileServer) apply(c *ServerConfig) error {
	if fs == nil {
		return nil
	}
	set(&c.JobTrackedVersions, fs.JobTrackedVersions)
	set(&c.JobMaxCount, fs.JobMaxCount)
	set(&c.JobMaxSize, fs.JobMaxSize)
	fs.Etcd.apply(&c.Etcd)
	return setDurations("server",
		durationField{"eval_gc_threshold", fs.EvalGCThreshold, &c.EvalGCThreshold},
		durationField{"alloc_gc_threshold", fs.AllocGCThreshold, &c.AllocGCThreshold},
		durationField{"node_gc_threshold", fs.NodeGCThreshold, &c.NodeGCThreshold},
		durationField{"gc_interval", fs.GCInterval, &c.GCInterval})
}

// apply copies the file's client block over c.
func (cl *fileClient) apply(c *ClientConfig) error {
	if cl == nil {
		return nil
	}
	set(&c.CNIPath, cl.CNIPath)
	set(&c.CNIConfigDir, cl.CNIConfigDir)
	set(&c.BridgeNetworkSubnet, cl.BridgeNetworkSubnet)
	set(&c.BridgeNetworkName, cl.BridgeNetworkName)
	set(&c.MinDynamicPort, cl.MinDynamicPort)
	set(&c.MaxDynamicPort, cl.MaxDynamicPort)
	for k, v := range cl.Options {
		c.Options[k] = v
	}
	c.Meta = cl.Meta
	if cl.Reserved != nil {
		set(&c.ReservedPorts, cl.Reserved.ReservedPorts)
		set(&c.ReservedCPU, cl.Reserved.CPU)
		set(&c.ReservedMemoryMB, cl.Reserved.MemoryMB)
		set(&c.ReservedDiskMB, cl.Reserved.DiskMB)
	}
	set(&c.GCMaxAllocs, cl.GCMaxAllocs)
	set(&c.GCDiskUsageThreshold, cl.GCDiskUsage)
	if err := applyChrootEnv(cl.ChrootEnv, c); err != nil {
		return err
	}
	return setDurations("client",
		durationField{"gc_interval", cl.GCInterval, &c.GCInterval},
		durationField{"gc_alloc_ttl", cl.GCAllocTTL, &c.GCAllocTTL},
		durationField{"max_kill_timeout", cl.MaxKillTimeout, &c.MaxKillTimeout})
}

// durationField is a Go duration string of a config block and where it goes.
type durationField struct {
	key string
	src *hcl.Attribute
	dst *time.Duration
}

// setDurations parses the set fields of block; a bad one is an error at
// the value's file:line:col naming the key.
func setDurations(block string, fields ...durationField) error {
	for _, d := range fields {
		var s *string
		if diags := decodeAttr(d.src, &s); diags.HasErrors() {
			return diagError(diags)
		}
		if s == nil {
			continue
		}
		v, err := time.ParseDuration(*s)
		if err != nil {
			return diagError(attrDiag(d.src, "Invalid duration", fmt.Sprintf(
				"%s.%s: %v; use a Go duration such as \"30s\", \"5m\" or \"1h\"", block, d.key, err)))
		}
		*d.dst = v
	}
	return nil
}

func (c *ServerConfig) problems() []string {
	var out []string
	if c.JobTrackedVersions < 0 {
		out = append(out, "server.job_tracked_versions must not be negative")
	}
	if c.EvalGCThreshold < 0 || c.AllocGCThreshold < 0 || c.NodeGCThreshold < 0 || c.GCInterval < 0 {
		out = append(out, "server.eval_gc_threshold, alloc_gc_threshold, node_gc_threshold and gc_interval must not be negative")
	}
	return append(out, c.Etcd.problems()...)
}

// validateJob is the server's admission check. Count and size are not
// checked here: the server enforces job_max_count and job_max_size itself
// (server.Config), before its plan lock, and also caps count × size.
func (a *Agent) validateJob(job *structs.Job) ([]string, error) {
	return jobspecs.ValidateWith(job, jobspecs.Unbounded())
}
