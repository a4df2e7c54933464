package testutil

import (
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// Ports that must be known before something binds them (a sidecar's public
// and upstream listeners, which the catalog announces, and the control
// plane's gRPC address, which a restart reuses) cannot come from a
// 127.0.0.1:0 listener that stays open. A port found by listening on :0 and
// closing is unsafe here: the kernel hands the same port to the next :0
// listener (an echo app, an admin server) or outgoing connection of a test
// running in parallel. So FreePort picks ports below the kernel's ephemeral
// range and below Nomad's dynamic range (20000-32000), checks they are free
// on every address, and never hands a port out twice in this process.
const (
	portRangeLow  = 10000
	portRangeHigh = 20000 // exclusive
)

var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// FreePort returns a TCP port that is free on 0.0.0.0 and was never
// returned before in this process.
func FreePort(t testing.TB) int {
	t.Helper()
	high := min(portRangeHigh, ephemeralLow())
	handedOut.Lock()
	defer handedOut.Unlock()
	for attempt := 0; attempt < 200; attempt++ {
		p := portRangeLow + rand.IntN(high-portRangeLow)
		if handedOut.ports[p] {
			continue
		}
		ln, err := net.Listen("tcp4", net.JoinHostPort("0.0.0.0", strconv.Itoa(p)))
		if err != nil {
			continue
		}
		ln.Close()
		handedOut.ports[p] = true
		return p
	}
	t.Fatalf("failed to find a free port in [%d, %d)", portRangeLow, high)
	return 0
}

// ephemeralLow is the lowest port the kernel picks for :0 and outgoing
// connections (32768 if unknown).
func ephemeralLow() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 32768
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 32768
	}
	n, err := strconv.Atoi(f[0])
	if err != nil || n <= portRangeLow+1000 {
		return 32768
	}
	return n
}
