package jobspecs

import (
	"fmt"
	"net"
	"strconv"
)

// taggedAddresses decodes a service's tagged_addresses (Nomad's map of
// name to "ip" or "ip:port"); a value that is neither is an error at the
// map's position.
func (d *decoder) taggedAddresses(c content, p path) map[string]string {
	m := d.strMap(c, p, "tagged_addresses")
	key := p.attr("tagged_addresses").key
	for _, name := range sortedKeys(m) {
		if err := checkTaggedAddress(m[name]); err != nil {
			d.errAt(key, d.ranges[key], "Invalid tagged address",
				fmt.Sprintf("tagged_addresses %q: %v.", name, err))
		}
	}
	return m
}

// checkTaggedAddress accepts "ip" or "ip:port" (port 1-65535).
func checkTaggedAddress(v string) error {
	if net.ParseIP(v) != nil {
		return nil
	}
	host, port, err := net.SplitHostPort(v)
	if err != nil || net.ParseIP(host) == nil {
		return fmt.Errorf("%q is not an IP address or IP:port", v)
	}
	if n, err := strconv.Atoi(port); err != nil || n < 1 || n > 65535 {
		return fmt.Errorf("%q has an invalid port", v)
	}
	return nil
}
