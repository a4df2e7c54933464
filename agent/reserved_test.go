package agent

import (
	"context"
	"testing"
)

// TestReservedResourcesBoundPlacement: client { reserved { cpu memory } }
// reaches the node (ReservedResources) and the scheduler places only in
// what is left: a job asking for more cpu than the node has beyond its
// reservation fails with cpu exhausted.
func TestReservedResourcesBoundPlacement(t *testing.T) {
	a := startAgentWith(t, t.TempDir(), func(cfg *Config) {
		cfg.Client.ReservedMemoryMB = 64
		cfg.Client.ReservedCPU = 1 << 20 // more than the node has: nothing left for jobs
	})
	t.Cleanup(func() { _ = a.Shutdown() })
	node := a.Client().Node()
	if node.ReservedResources == nil || node.ReservedResources.Cpu.CpuShares != 1<<20 ||
		node.ReservedResources.Memory.MemoryMB != 64 {
		t.Fatalf("node reserved resources = %+v, want cpu %d, memory 64", node.ReservedResources, 1<<20)
	}
	job := parseJob(t, `job "big" {
  datacenters = ["dc1"]
  group "g" {
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["60"]
      }
      resources {
        cpu    = 100
        memory = 32
      }
    }
  }
}`)
	res, err := a.server.RegisterJob(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	cleanupJob(t, &a, "big")
	eval, err := a.server.Eval(context.Background(), res.EvalID)
	if err != nil {
		t.Fatal(err)
	}
	m := eval.FailedTGAllocs["g"]
	if m == nil || m.DimensionExhausted["cpu"] != 1 {
		t.Errorf("placement beyond the reservation: eval %q %+v, want cpu exhausted on the node", eval.StatusDescription, m)
	}
}
