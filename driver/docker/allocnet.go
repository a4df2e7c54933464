package docker

import (
	"context"
	"net"

	"github.com/containernetworking/plugins/pkg/ns"
	"github.com/docker/docker/client"

	"github.com/meshlet/meshlet/driver"
)

// allocNet is the allocation's network as its tasks see it: the address
// CNI gave the namespace and the pause container's hostname. Nomad writes
// both into the /etc/hosts of docker tasks in bridge mode.
type allocNet struct {
	address, hostname string
}

// allocNetOf reads the allocation's address from its namespace and the
// hostname from the pause container. Either may come back empty (then
// /etc/hosts has no line for the allocation), which is logged.
func (d *Driver) allocNetOf(ctx context.Context, c *client.Client, pauseID string, cfg *driver.TaskConfig) *allocNet {
	an := &allocNet{}
	if info, err := c.ContainerInspect(ctx, pauseID); err == nil && info.Config != nil {
		an.hostname = info.Config.Hostname
	} else if err != nil {
		d.logger.Warn("failed to read the pause container's hostname", "alloc_id", cfg.AllocID, "task", cfg.Name, "error", err)
	}
	addr, err := nsAddress(cfg.NetNSPath)
	if err != nil {
		d.logger.Warn("failed to read the allocation's address", "alloc_id", cfg.AllocID, "task", cfg.Name, "error", err)
	}
	an.address = addr
	return an
}

// nsAddress is the namespace's address: eth0's (CNI's interface) first
// IPv4 address, else its first global IPv6 one; failing that, the same
// from any other non-loopback interface ("" when there is none).
func nsAddress(path string) (string, error) {
	var addr string
	err := ns.WithNetNSPath(path, func(ns.NetNS) error {
		ifs, err := net.Interfaces()
		if err != nil {
			return err
		}
		var fallback string
		for _, ifc := range ifs {
			if ifc.Flags&net.FlagLoopback != 0 {
				continue
			}
			a := ifaceAddress(ifc)
			if ifc.Name == "eth0" && a != "" {
				addr = a
				return nil
			}
			if fallback == "" {
				fallback = a
			}
		}
		addr = fallback
		return nil
	})
	return addr, err
}

// ifaceAddress is the interface's first IPv4 address, else its first
// global unicast IPv6 address.
func ifaceAddress(ifc net.Interface) string {
	addrs, err := ifc.Addrs()
	if err != nil {
		return ""
	}
	var v6 string
	for _, a := range addrs {
		ipn, ok := a.(*net.IPNet)
		if !ok {
			continue
		}
		if ipn.IP.To4() != nil {
			return ipn.IP.String()
		}
		if v6 == "" && ipn.IP.IsGlobalUnicast() {
			v6 = ipn.IP.String()
		}
	}
	return v6
}
