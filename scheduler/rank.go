package scheduler

import (
	"math"

	"github.com/meshlet/meshlet/structs"
)

// Nomad's resources for a task that asks for none.
const (
	DefaultCPU      = 100 // MHz
	DefaultMemoryMB = 300
)

// Dimensions named in Failure.Exhausted when an allocation does not fit,
// as Nomad's AllocMetric.DimensionExhausted names them.
const (
	DimensionCPU    = "cpu"
	DimensionMemory = "memory"
)

// binPackingMaxFitScore is the best raw score of Nomad's ScoreFitBinPack.
const binPackingMaxFitScore = 18.0

// resources is an amount of CPU (MHz) and memory (MB). As a capacity, a
// dimension with limit false is not tracked (the node did not report it).
type resources struct {
	cpu, mem           int64
	cpuLimit, memLimit bool
}

func (r resources) add(o resources) resources {
	r.cpu += o.cpu
	r.mem += o.mem
	return r
}

// taskAsk is what a task reserves on n: its cpu and memory, or Nomad's
// defaults. A task asking for cores reserves the MHz of that many of the
// node's cores (the default cpu when the node did not report its cores).
func taskAsk(t *structs.Task, n *structs.Node) resources {
	ask := resources{cpu: DefaultCPU, mem: DefaultMemoryMB}
	if t == nil || t.Resources == nil {
		return ask
	}
	r := t.Resources
	switch {
	case r.Cores != nil && *r.Cores > 0:
		if nr := n.NodeResources; nr != nil && nr.Cpu.TotalCpuCores > 0 && nr.Cpu.CpuShares > 0 {
			ask.cpu = int64(*r.Cores) * nr.Cpu.CpuShares / int64(nr.Cpu.TotalCpuCores)
		}
	case r.CPU != nil && *r.CPU > 0:
		ask.cpu = int64(*r.CPU)
	}
	if r.MemoryMB != nil && *r.MemoryMB > 0 {
		ask.mem = int64(*r.MemoryMB)
	}
	return ask
}

// groupAsk is the sum of the group's tasks' asks.
func groupAsk(tg *structs.TaskGroup, n *structs.Node) resources {
	var sum resources
	for _, t := range tg.Tasks {
		sum = sum.add(taskAsk(t, n))
	}
	return sum
}

// allocAsk is what an existing allocation holds on n: its group's ask in
// the job version it runs, or one default task when that is unknown.
func allocAsk(a *structs.Allocation, n *structs.Node) resources {
	if a.Job != nil {
		if tg := a.Job.LookupTaskGroup(a.TaskGroup); tg != nil {
			return groupAsk(tg, n)
		}
	}
	return taskAsk(nil, n)
}

// nodeCapacity is what allocations may use on n: NodeResources minus
// ReservedResources. A dimension the node reports as 0 (NodeResources nil,
// as from single-node callers that never fingerprinted resources) is
// unlimited, so such nodes take any number of allocations, as before.
func nodeCapacity(n *structs.Node) resources {
	var c resources
	nr := n.NodeResources
	if nr == nil {
		return c
	}
	var resCPU, resMem int64
	if rr := n.ReservedResources; rr != nil {
		resCPU, resMem = clampInt64(rr.Cpu.CpuShares), clampInt64(rr.Memory.MemoryMB)
	}
	if nr.Cpu.CpuShares > 0 {
		c.cpu, c.cpuLimit = max(nr.Cpu.CpuShares-resCPU, 0), true
	}
	if nr.Memory.MemoryMB > 0 {
		c.mem, c.memLimit = max(nr.Memory.MemoryMB-resMem, 0), true
	}
	return c
}

func clampInt64(v uint64) int64 {
	if v > math.MaxInt64 {
		return math.MaxInt64
	}
	return int64(v)
}

// exhaustedDimension returns the dimension (cpu first, as Nomad checks)
// that used + ask overflows, or "" when the allocation fits.
func exhaustedDimension(capacity, used, ask resources) string {
	switch {
	case capacity.cpuLimit && used.cpu+ask.cpu > capacity.cpu:
		return DimensionCPU
	case capacity.memLimit && used.mem+ask.mem > capacity.mem:
		return DimensionMemory
	}
	return ""
}

// binpackScore is Nomad's ScoreFitBinPack normalized to 0..1: the fuller
// the node after the placement, the higher. An untracked dimension counts
// as entirely free.
func binpackScore(capacity, after resources) float64 {
	free := func(limit bool, used, total int64) float64 {
		if !limit || total <= 0 {
			return 1
		}
		return 1 - float64(used)/float64(total)
	}
	total := math.Pow(10, free(capacity.cpuLimit, after.cpu, capacity.cpu)) +
		math.Pow(10, free(capacity.memLimit, after.mem, capacity.mem))
	score := min(max(20-total, 0), binPackingMaxFitScore)
	return score / binPackingMaxFitScore
}

// antiAffinityScore is Nomad's job anti-affinity penalty for a node that
// already runs collisions allocations of the group: -(collisions+1)/count.
func antiAffinityScore(collisions, count int) float64 {
	if count < 1 {
		count = 1
	}
	return -float64(collisions+1) / float64(count)
}
