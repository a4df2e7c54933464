package client

import (
	"bufio"
	"os"
	"runtime"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/meshlet/meshlet/structs"
)

// fallbackCoreMHz is a core's clock when /proc/cpuinfo does not say (some
// virtual machines and architectures), as Nomad's cpu fingerprint falls
// back to a fixed speed.
const fallbackCoreMHz = 1000

// nodeResources fingerprints the node's capacity, as Nomad's cpu, memory
// and storage fingerprints: total MHz over all cores, total memory, and
// the space free under dataDir.
func nodeResources(dataDir string) *structs.NodeResources {
	cores := runtime.NumCPU()
	res := &structs.NodeResources{Cpu: structs.NodeCpuResources{
		CpuShares: int64(cores) * cpuMHz(), TotalCpuCores: uint16(cores)}}
	var si unix.Sysinfo_t
	if unix.Sysinfo(&si) == nil {
		res.Memory.MemoryMB = int64(uint64(si.Totalram) * uint64(si.Unit) / (1 << 20))
	}
	var st unix.Statfs_t
	if unix.Statfs(dataDir, &st) == nil {
		res.Disk.DiskMB = int64(st.Bavail * uint64(st.Bsize) / (1 << 20))
	}
	return res
}

// cpuMHz is the clock of the first core /proc/cpuinfo lists.
func cpuMHz() int64 {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return fallbackCoreMHz
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || strings.TrimSpace(k) != "cpu MHz" {
			continue
		}
		if mhz, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil && mhz > 0 {
			return int64(mhz)
		}
	}
	return fallbackCoreMHz
}
