// Package subnet picks private /24 subnets for the test and bench networks
// that meshlet's e2e tests and benchmarks create (bridges of namespaced
// "hosts" and agents): a 10.200-249.100-249.0/24 that overlaps no route or
// address of the host, reserved against other test and bench processes
// running at the same time (a file per subnet in a shared directory,
// created exclusively and removed on release).
package subnet

import (
	"crypto/rand"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// ErrNoSubnet: every candidate subnet is in use or reserved.
var ErrNoSubnet = errors.New("no free 10.200-249.100-249.0/24 subnet on this host")

// ReservationDir is where reservations are kept (shared by every process
// that picks with this package).
var ReservationDir = filepath.Join(os.TempDir(), "meshlet-e2e-subnets")

// Pick returns a free subnet ("10.x.y.0/24") and the function releasing
// its reservation.
func Pick() (cidr string, release func(), err error) {
	used, err := HostNets()
	if err != nil {
		return "", nil, err
	}
	if err := os.MkdirAll(ReservationDir, 0o755); err != nil {
		return "", nil, fmt.Errorf("failed to reserve a subnet: %w", err)
	}
	const span = 50 * 150
	start, err := rand.Int(rand.Reader, big.NewInt(span))
	if err != nil {
		return "", nil, fmt.Errorf("failed to pick a subnet: %w", err)
	}
	for i := 0; i < span; i++ {
		k := (int(start.Int64()) + i) % span
		s := fmt.Sprintf("10.%d.%d.0/24", 200+k/150, 100+k%150)
		_, c, _ := net.ParseCIDR(s)
		if Overlaps(used, c) {
			continue
		}
		path := filepath.Join(ReservationDir, strings.ReplaceAll(s, "/", "_"))
		f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err != nil {
			continue
		}
		_ = f.Close()
		return s, func() { _ = os.Remove(path) }, nil
	}
	return "", nil, ErrNoSubnet
}

// Overlaps reports whether c overlaps any of used.
func Overlaps(used []*net.IPNet, c *net.IPNet) bool {
	for _, u := range used {
		if u.Contains(c.IP) || c.Contains(u.IP) {
			return true
		}
	}
	return false
}

// HostNets are the destinations of every IPv4 route (all tables, so local
// and broadcast addresses too) and every interface address of the
// caller's network namespace.
func HostNets() ([]*net.IPNet, error) {
	out, err := exec.Command("ip", "-4", "-o", "route", "show", "table", "all").Output()
	if err != nil {
		return nil, fmt.Errorf("failed to list routes: %w", err)
	}
	used := parseRouteDests(string(out))
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return nil, fmt.Errorf("failed to list addresses: %w", err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok {
			used = append(used, ipn)
		}
	}
	return used, nil
}

// parseRouteDests reads the destinations of `ip -4 -o route show` lines
// (a leading route type skipped, "default" ignored).
func parseRouteDests(out string) []*net.IPNet {
	types := map[string]bool{"local": true, "broadcast": true, "unicast": true, "multicast": true,
		"unreachable": true, "blackhole": true, "prohibit": true, "throw": true, "anycast": true, "nat": true}
	var used []*net.IPNet
	for _, line := range strings.Split(out, "\n") {
		f := strings.Fields(line)
		if len(f) > 1 && types[f[0]] {
			f = f[1:]
		}
		if len(f) == 0 || f[0] == "default" {
			continue
		}
		dst := f[0]
		if !strings.Contains(dst, "/") {
			dst += "/32"
		}
		if _, c, err := net.ParseCIDR(dst); err == nil {
			used = append(used, c)
		}
	}
	return used
}
