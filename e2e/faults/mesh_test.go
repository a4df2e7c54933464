// Package faults holds the end-to-end fault tests of issue #13: the agent
// crashing or being away while traffic flows through the mesh, a sidecar
// being killed, lost, corrupt and full state, and many start/stop cycles.
// They assert outcomes (no failed requests, nothing left behind, a clear
// error); `make bench`'s Faults area reports the figures.
package faults

import (
	"maps"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/meshlet/meshlet/e2e/framework"
)

// upstream is web's upstream listener for db, inside web's namespace.
const upstream = "127.0.0.1:9191"

// TestMeshSurvivesControlPlaneFaults runs an echo mesh under steady load
// (about 200 new connections a second, each authorized by db's sidecar)
// through three faults in turn: the agent SIGKILLed and restarted, the
// agent stopped for a while (the control plane away), and db's sidecar
// SIGKILLed.
func TestMeshSurvivesControlPlaneFaults(t *testing.T) {
	a := framework.NewAgent(t, framework.Options{})
	job := a.RunJob("../connect/input/echo.hcl") // the connect tests' own mesh
	allocs := a.RunningAllocs(job, 2)
	web, db := a.AllocByGroup(allocs, "web"), a.AllocByGroup(allocs, "db")
	webNS, dbNS := netnsPath(web.ID), netnsPath(db.ID)
	a.Eventually(30*time.Second, "echo through the mesh", func() bool { return echoOnce(webNS, upstream, 0) == nil })

	t.Run("agent SIGKILL and restart", func(t *testing.T) {
		webProcs, dbProcs := procsIn(t, webNS), procsIn(t, dbNS)
		tr := startTraffic(webNS, upstream, 5*time.Millisecond, 10000, 60*time.Second)
		time.Sleep(2 * time.Second)
		a.Kill()
		time.Sleep(2 * time.Second)
		a.Restart()
		// Past the sidecars' reconnect backoff (at most 5 s).
		time.Sleep(6 * time.Second)
		ok, failed, errs := tr.Stop()
		t.Logf("agent crash: %d requests ok, %d failed", ok, failed)
		figure(t, "crash_requests", float64(ok+failed))
		figure(t, "crash_failed", float64(failed))
		if failed != 0 || ok == 0 {
			t.Errorf("%d of %d requests failed across an agent crash and restart (want 0): %v", failed, ok+failed, errs)
		}
		webAfter, dbAfter := procsIn(t, webNS), procsIn(t, dbNS)
		figure(t, "crash_reattached", b2f(samePIDs(webAfter, webProcs) && samePIDs(dbAfter, dbProcs)))
		figure(t, "crash_extra_processes", float64(len(webAfter)+len(dbAfter)-len(webProcs)-len(dbProcs)))
		if !samePIDs(webAfter, webProcs) {
			t.Errorf("web's processes changed across the restart (tasks not reattached, or duplicated):\nbefore %v\nafter  %v", webProcs, webAfter)
		}
		if !samePIDs(dbAfter, dbProcs) {
			t.Errorf("db's processes changed across the restart:\nbefore %v\nafter  %v", dbProcs, dbAfter)
		}
		a.RunningAllocs(job, 2)
	})

	t.Run("control plane away", func(t *testing.T) {
		away := outage()
		tr := startTraffic(webNS, upstream, 5*time.Millisecond, int((away+time.Minute)/(5*time.Millisecond)), away+time.Minute)
		time.Sleep(time.Second)
		a.Interrupt()
		// Sidecars keep serving with their last configuration and their
		// last authorization decision (fail-static).
		time.Sleep(away)
		okAway, failedAway := tr.Counts()
		a.Restart()
		time.Sleep(6 * time.Second)
		ok, failed, errs := tr.Stop()
		t.Logf("control plane away for %s: %d requests ok (%d while away), %d failed", away, ok, okAway, failed)
		figure(t, "outage_seconds", away.Seconds())
		figure(t, "outage_requests", float64(ok+failed))
		figure(t, "outage_failed", float64(failed))
		if failed != 0 || okAway == 0 {
			t.Errorf("%d of %d requests failed while the control plane was away and after it came back (want 0): %v (failed while away: %d)", failed, ok+failed, errs, failedAway)
		}
	})

	t.Run("sidecar SIGKILL", func(t *testing.T) {
		pid := sidecarPID(t, dbNS)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		killed := time.Now()
		a.Eventually(60*time.Second, "traffic through a restarted sidecar", func() bool {
			return echoOnce(webNS, upstream, 1) == nil
		})
		gap := time.Since(killed)
		t.Logf("sidecar SIGKILL: traffic flows again after %s", gap.Round(time.Millisecond))
		figure(t, "sidecar_kill_recovery_seconds", gap.Seconds())
		if now := sidecarPID(t, dbNS); now == pid {
			t.Errorf("the killed sidecar (pid %d) is still the one in db's namespace", pid)
		}
		a.RunningAllocs(job, 2)
	})
}

func samePIDs(a, b map[int]string) bool {
	return slices.Equal(slices.Sorted(maps.Keys(a)), slices.Sorted(maps.Keys(b)))
}
