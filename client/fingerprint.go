package client

import (
	"context"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"golang.org/x/sys/unix"

	"github.com/meshlet/meshlet/structs"
)

// fingerprintTimeout bounds each driver's Fingerprint: a hang guard.
const fingerprintTimeout = 30 * time.Second

// fingerprint builds the node: attributes, and each driver's health.
func (c *Client) fingerprint(ctx context.Context, nodeID string) *structs.Node {
	host, _ := os.Hostname()
	name := c.cfg.NodeName
	if name == "" {
		name = host
	}
	dc := c.cfg.Datacenter
	if dc == "" {
		dc = "dc1"
	}
	attrs := map[string]string{
		"kernel.name":               runtime.GOOS,
		"cpu.arch":                  runtime.GOARCH,
		"cpu.numcores":              strconv.Itoa(runtime.NumCPU()),
		"unique.hostname":           host,
		"unique.network.ip-address": "127.0.0.1",
		"meshlet.version":           c.cfg.Version,
		"meshlet.binary":            BinaryPath(c.cfg.BinaryPath),
		"nomad.version":             "1.9.0",
		"os.name":                   runtime.GOOS,
	}
	for k, v := range c.cfg.Attributes {
		attrs[k] = v
	}
	var uts unix.Utsname
	if unix.Uname(&uts) == nil {
		attrs["kernel.version"] = unix.ByteSliceToString(uts.Release[:])
	}
	node := &structs.Node{ID: nodeID, Name: name, Datacenter: dc, Status: structs.NodeStatusReady,
		Attributes: attrs, Meta: c.cfg.NodeMeta, Drivers: map[string]*structs.DriverInfo{}, HTTPAddr: c.cfg.HTTPAddr, TLSEnabled: c.cfg.HTTPTLS,
		SecretID: c.secretID, NodeResources: nodeResources(c.cfg.DataDir), SchedulingEligibility: structs.NodeSchedulingEligible,
		ReservedResources: c.cfg.Reserved}
	for dname, d := range c.drivers {
		fctx, cancel := context.WithTimeout(ctx, fingerprintTimeout)
		fp, err := d.Fingerprint(fctx)
		cancel()
		info := &structs.DriverInfo{UpdateTime: time.Now()}
		switch {
		case err != nil:
			info.HealthDescription = "fingerprint failed: " + err.Error()
		default:
			info.Detected, info.Healthy, info.HealthDescription, info.Attributes = fp.Detected, fp.Healthy, fp.HealthDescription, fp.Attributes
		}
		if info.Detected {
			attrs["driver."+dname] = "1"
		}
		for k, v := range info.Attributes { // full keys, as Nomad's drivers give them
			attrs[k] = v
		}
		node.Drivers[dname] = info
		c.logger.Debug("fingerprinted driver", "driver", dname, "detected", info.Detected, "healthy", info.Healthy,
			"health", info.HealthDescription)
	}
	return node
}

// BinaryPath resolves the meshlet binary's absolute path (symbolic links
// resolved): override, or the running executable when it is empty. It is
// the node attribute meshlet.binary.
func BinaryPath(override string) string {
	p := override
	if p == "" {
		var err error
		if p, err = os.Executable(); err != nil {
			return ""
		}
	}
	if abs, err := filepath.Abs(p); err == nil {
		p = abs
	}
	if real, err := filepath.EvalSymlinks(p); err == nil {
		p = real
	}
	return p
}
