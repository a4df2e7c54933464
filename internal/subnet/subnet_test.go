package subnet

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestParseRouteDests(t *testing.T) {
	out := "default via 10.0.0.1 dev eth0\n10.0.0.0/24 dev eth0 proto kernel scope link src 10.0.0.5\n" +
		"local 10.0.0.5 dev eth0 table local proto kernel scope host src 10.0.0.5\n" +
		"broadcast 10.0.0.255 dev eth0 table local\n"
	used := parseRouteDests(out)
	if len(used) != 3 {
		t.Fatalf("destinations %v, want 3", used)
	}
	_, inside, _ := net.ParseCIDR("10.0.0.0/24")
	_, free, _ := net.ParseCIDR("10.210.100.0/24")
	if !Overlaps(used, inside) || Overlaps(used, free) {
		t.Errorf("overlap: %s %v, %s %v", inside, Overlaps(used, inside), free, Overlaps(used, free))
	}
}

// Two picks never return the same subnet while both are reserved, and a
// release frees it.
func TestPickReserves(t *testing.T) {
	defer func(d string) { ReservationDir = d }(ReservationDir)
	ReservationDir = t.TempDir()
	a, releaseA, err := Pick()
	if err != nil {
		t.Fatal(err)
	}
	b, releaseB, err := Pick()
	if err != nil {
		t.Fatal(err)
	}
	defer releaseB()
	if a == b || !strings.HasPrefix(a, "10.") || !strings.HasSuffix(a, ".0/24") {
		t.Fatalf("picked %s and %s", a, b)
	}
	path := filepath.Join(ReservationDir, strings.ReplaceAll(a, "/", "_"))
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("no reservation for %s: %v", a, err)
	}
	releaseA()
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Fatalf("reservation of %s left after release: %v", a, err)
	}
	used, err := HostNets()
	if err != nil {
		t.Fatal(err)
	}
	_, c, _ := net.ParseCIDR(b)
	if Overlaps(used, c) {
		t.Fatalf("picked %s overlaps a host route or address", b)
	}
}
