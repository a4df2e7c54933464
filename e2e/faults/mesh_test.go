// Package faults holds the end-to-end fault tests of issue #13: the agent
// crashing or being away while traffic flows through the mesh, a sidecar
// being killed, lost, corrupt and full state, and many start/stop cycles.
// They assert outcomes (no failed requests, nothing left behind, a clear
// error); `make bench`'s Faults area reports the figures.
package faults

import (
	"maps"
	"os"
	"path/filepath"
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
		streams := adsReconnects(t, webNS, dbNS)
		tr := startTraffic(webNS, upstream, 5*time.Millisecond, 10000, 90*time.Second)
		waitRequests(t, tr, 200, "before the crash")
		a.Kill()
		// With the agent dead the mesh keeps serving (judged below): a
		// few hundred requests (about 2 s) go through before the restart.
		waitRequests(t, tr, 400, "with the agent dead")
		restarting := time.Now()
		a.Restart()
		restarted := time.Now()
		// The sidecars are back on the new agent's streams (past their
		// reconnect backoff), then the load runs on a while.
		waitReconnected(t, a, streams)
		waitRequests(t, tr, 400, "after the sidecars reconnected")
		ok, failed, _ := tr.Stop()
		t.Logf("agent crash: %d requests ok, %d failed", ok, failed)
		figure(t, "crash_requests", float64(ok+failed))
		figure(t, "crash_failed", float64(failed))
		checkFailures(t, a, tr, "an agent crash and restart", restarting, restarted, web.ID, db.ID)
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
		streams := adsReconnects(t, webNS, dbNS)
		tr := startTraffic(webNS, upstream, 5*time.Millisecond, int((away+2*time.Minute)/(5*time.Millisecond)), away+2*time.Minute)
		waitRequests(t, tr, 200, "before the agent stops")
		okBefore, failedBefore := tr.Counts()
		a.Interrupt()
		// Sidecars keep serving with their last configuration and their
		// last authorization decision (fail-static) for the whole outage:
		// its length is the figure under test (MESHLET_FAULTS_OUTAGE).
		time.Sleep(away)
		okAway, failedAway := tr.Counts()
		okAway, failedAway = okAway-okBefore, failedAway-failedBefore
		restarting := time.Now()
		a.Restart()
		restarted := time.Now()
		waitReconnected(t, a, streams)
		waitRequests(t, tr, 400, "after the sidecars reconnected")
		ok, failed, _ := tr.Stop()
		t.Logf("control plane away for %s: %d requests ok (%d while away), %d failed", away, ok, okAway, failed)
		figure(t, "outage_seconds", away.Seconds())
		figure(t, "outage_requests", float64(ok+failed))
		figure(t, "outage_failed", float64(failed))
		if failedAway != 0 || okAway == 0 {
			t.Errorf("%d of %d requests failed while the control plane was away (fail-static wants 0)", failedAway, okAway+failedAway)
		}
		checkFailures(t, a, tr, "the control plane's return", restarting, restarted, web.ID, db.ID)
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

// logSidecars logs the tail of the named allocations' sidecar logs
// (allocation ID, service pairs), to explain failed requests.
func logSidecars(t *testing.T, a *framework.Agent, pairs ...string) {
	t.Helper()
	for i := 0; i+1 < len(pairs); i += 2 {
		path := filepath.Join(a.DataDir, "data", "alloc", pairs[i], "alloc", "logs", "connect-proxy-"+pairs[i+1]+".stderr.0")
		b, err := os.ReadFile(path)
		if err != nil {
			t.Logf("sidecar log %s: %v", path, err)
			continue
		}
		t.Logf("sidecar log of %s (tail):\n%s", pairs[i+1], lastLines(string(b), 40))
	}
}

// checkFailures judges the failed requests of a phase in which the agent
// was restarted between restarting and restarted. Requests through the
// mesh must not fail outside the restart (plus a second for the sidecars'
// streams to come back), and at most 1% may fail inside it: the bench's
// Faults area reports the count against its target of 0. Any failure is
// logged with the sidecars' logs. (Once, 7 of 1,918 failed within 26 ms
// of the restart: reconnecting sidecars were told their resources were
// removed before the new agent had built them; xds/warmup.go fixed that.)
func checkFailures(t *testing.T, a *framework.Agent, tr *traffic, what string, restarting, restarted time.Time, webID, dbID string) {
	t.Helper()
	ok, failed := tr.Counts()
	if ok == 0 {
		t.Fatalf("no request through the mesh succeeded across %s", what)
	}
	if failed == 0 {
		return
	}
	tr.mu.Lock()
	errs := append([]string(nil), tr.errs...)
	tr.mu.Unlock()
	t.Logf("%d of %d requests failed across %s: %v", failed, ok+failed, what, errs)
	logSidecars(t, a, webID, "web", dbID, "db")
	if outside := tr.FailedOutside(restarting, restarted.Add(time.Second)); outside > 0 {
		t.Errorf("%d requests failed outside the agent's restart (the mesh must keep serving with the agent away)", outside)
	}
	if failed*100 > ok+failed {
		t.Errorf("%d of %d requests failed across %s (more than 1%%)", failed, ok+failed, what)
	}
}
