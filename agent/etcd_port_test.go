package agent

import (
	"net"
	"sync/atomic"
	"testing"
)

// A port picked free for the embedded etcd member but taken before the
// member binds it (another socket of the host or the agent) costs one
// more pick, not the agent's start.
func TestEtcdPortTakenMeanwhile(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	var picks atomic.Int32
	real := pickLoopbackPort
	pickLoopbackPort = func() (int, error) {
		if picks.Add(1) == 1 {
			return taken.Addr().(*net.TCPAddr).Port, nil
		}
		return real()
	}
	t.Cleanup(func() { pickLoopbackPort = real })
	a := startAgent(t, t.TempDir())
	defer a.Shutdown()
	if n := picks.Load(); n < 3 {
		t.Fatalf("ports picked = %d, want the taken one and two more (client and peer)", n)
	}
	for _, p := range a.etcdPorts() {
		if p == "" || p == "0" {
			t.Fatalf("etcd ports = %v", a.etcdPorts())
		}
	}
}
