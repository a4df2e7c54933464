package cluster

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// TestJobVersionsAreCollected: after 20 updates of a job on a cluster the
// servers keep its 6 latest versions (Nomad's job_tracked_versions), and
// only one allocation runs.
func TestJobVersionsAreCollected(t *testing.T) {
	c := newCluster(t)
	s1 := c.AddServer("s1", 2, 1)
	c1 := c.AddClient("c1", 5, s1)
	c.WaitNodesReady(60*time.Second, s1, c1)
	for i := range 20 {
		src := strings.Replace(sleepJob("gc", 1, false), `args    = ["3600"]`, fmt.Sprintf(`args    = ["%d"]`, 3600+i), 1)
		c.WaitEval(s1, c.RegisterJob(s1, src))
	}
	versions, _, _, err := s1.API().Jobs().Versions("gc", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(versions) != 6 || *versions[0].Version != 19 || *versions[5].Version != 14 {
		var got []uint64
		for _, v := range versions {
			got = append(got, *v.Version)
		}
		t.Errorf("versions kept = %v, want the 6 latest (19..14)", got)
	}
	c.WaitRunning(s1, "gc", 1, 60*time.Second)
}
