package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/driver/docker"
	"github.com/meshlet/meshlet/driver/executor"
	"github.com/meshlet/meshlet/internal/testutil"
	"github.com/meshlet/meshlet/jobspecs"
	"github.com/meshlet/meshlet/structs"
)

// TestMain lets the test binary double as the task executor: the drivers
// re-exec os.Executable() with "executor".
func TestMain(m *testing.M) {
	if len(os.Args) > 1 && os.Args[1] == "executor" {
		os.Exit(executor.Main(os.Args[2:]))
	}
	if len(os.Args) > 2 && os.Args[1] == "test-serve" {
		os.Exit(serveTestApp(os.Args[2]))
	}
	os.Exit(m.Run())
}

const hang = 60 * time.Second

func testLogger() hclog.Logger {
	level := hclog.Warn
	if l := os.Getenv("MESHLET_TEST_LOG"); l != "" {
		level = hclog.LevelFromString(l)
	}
	return hclog.New(&hclog.LoggerOptions{Level: level, Output: os.Stderr})
}

func startAgent(t *testing.T, dataDir string) *Agent {
	t.Helper()
	return startAgentWith(t, dataDir, nil)
}

// startAgentWith is startAgent with tune applied to the configuration first.
func startAgentWith(t *testing.T, dataDir string, tune func(*Config)) *Agent {
	t.Helper()
	cfg := DevConfig()
	cfg.DataDir = dataDir
	cfg.Ports = Ports{}
	cfg.NodeName = "test-node"
	// A network name of our own keeps CNI garbage collection away from
	// anything else on the host.
	cfg.Client.BridgeNetworkName = "mt" + uuid.NewString()[:8]
	cleanupBridge(t, cfg.Client.BridgeNetworkName)
	// The docker driver never meets the host's daemon: tests that need
	// one start their own (driver/docker/dockertest).
	cfg.Plugins = map[string]PluginConfig{docker.Name: {Docker: &DockerPluginConfig{Endpoint: "unix://" + filepath.Join(t.TempDir(), "docker.sock")}}}
	if tune != nil {
		tune(cfg)
	}
	a, err := New(cfg, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	return a
}

// parseJob parses an HCL jobspec the way `meshlet job run` does.
func parseJob(t *testing.T, src string) *structs.Job {
	t.Helper()
	job, diags := jobspecs.Parse("job.hcl", []byte(src), nil)
	if diags.HasErrors() {
		t.Fatalf("jobspec: %s", diags.Error())
	}
	return job
}

func shJob(id, script, extra string) string {
	return fmt.Sprintf(`
job %q {
  datacenters = ["dc1"]
  group "g" {
    %s
    task "t" {
      driver       = "raw_exec"
      kill_timeout = "3s"
      config {
        command = "/bin/sh"
        args    = ["-c", %q, "marker-%s"]
      }
    }
  }
}`, id, extra, script, id)
}

// loopScript writes its PID, says hello and loops until killed.
const loopScript = `echo "hello from $NOMAD_ALLOC_ID"; echo $$ > "$NOMAD_TASK_DIR/pid"; while :; do sleep 0.2; done`

func onlyAlloc(t *testing.T, b api.Backend, jobID string) *structs.Allocation {
	t.Helper()
	allocs, err := b.JobAllocations(context.Background(), jobID)
	if err != nil {
		t.Fatal(err)
	}
	if len(allocs) != 1 {
		t.Fatalf("job %s has %d allocations", jobID, len(allocs))
	}
	return allocs[0]
}

func waitAllocStatus(t *testing.T, b api.Backend, jobID, status string) *structs.Allocation {
	t.Helper()
	var last *structs.Allocation
	testutil.WaitFor(t, hang, "allocation "+status, func() bool {
		allocs, err := b.JobAllocations(context.Background(), jobID)
		if err != nil || len(allocs) == 0 {
			return false
		}
		last = allocs[len(allocs)-1]
		return last.ClientStatus == status
	})
	return last
}

func taskPID(t *testing.T, a *Agent, alloc *structs.Allocation) int {
	t.Helper()
	return testutil.WaitPIDFile(t, hang, filepath.Join(a.Config().DataDir, "alloc", alloc.ID, "t", "local", "pid"))
}

func alive(pid int) bool { return testutil.Running(pid) }

// countMarked counts live shells whose command line carries marker.
func countMarked(marker string) int {
	n := 0
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if len(args) > 0 && args[0] == "/bin/sh" && args[len(args)-1] == marker && alive(pid) {
			n++
		}
	}
	return n
}

func readLogs(t *testing.T, b api.Backend, allocID, stream string) string {
	t.Helper()
	rc, err := b.TaskLogs(context.Background(), api.LogRequest{AllocID: allocID, Task: "t", Type: stream, Origin: "start"})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	out, err := io.ReadAll(rc)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func stopJob(t *testing.T, b api.Backend, jobID string, purge bool) {
	t.Helper()
	if _, err := b.StopJob(context.Background(), jobID, purge); err != nil {
		t.Fatalf("stop job: %v", err)
	}
}

// cleanupJob stops the job at the end of the test, whatever happened, so
// no task outlives the test.
func cleanupJob(t *testing.T, a **Agent, jobID string) {
	t.Cleanup(func() {
		if *a == nil || (*a).Backend() == nil {
			return
		}
		stopAndWait((*a).Backend(), jobID)
		_ = (*a).Shutdown()
	})
}

func TestRawExecJobLifecycle(t *testing.T) {
	a := startAgent(t, t.TempDir())
	cleanupJob(t, &a, "web")
	b := a.Backend()
	ctx := context.Background()
	res, err := b.RegisterJob(ctx, parseJob(t, shJob("web", loopScript, "")), api.RegisterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.EvalID == "" {
		t.Fatal("no evaluation ID")
	}
	alloc := waitAllocStatus(t, b, "web", structs.AllocClientStatusRunning)
	if alloc.Name != "web.g[0]" || alloc.NodeName != "test-node" || alloc.TaskStates["t"].State != structs.TaskStateRunning {
		t.Fatalf("allocation = %+v", alloc)
	}
	pid := taskPID(t, a, alloc)
	if !alive(pid) {
		t.Fatalf("task pid %d not alive", pid)
	}
	if job, _ := b.GetJob(ctx, "web"); job.Status != structs.JobStatusRunning {
		t.Fatalf("job status = %s", job.Status)
	}

	testutil.WaitFor(t, hang, "hello in the logs", func() bool {
		return strings.Contains(readLogs(t, b, alloc.ID, "stdout"), "hello from "+alloc.ID)
	})

	var stdout, stderr strings.Builder
	code, err := b.ExecTask(ctx, api.ExecRequest{AllocID: alloc.ID[:8], Task: "t",
		Cmd: []string{"/bin/sh", "-c", `echo "exec in $NOMAD_ALLOC_ID at $(pwd)"; echo oops >&2; exit 3`}, Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	wantDir := filepath.Join(a.Config().DataDir, "alloc", alloc.ID, "t")
	if code != 3 || !strings.Contains(stdout.String(), "exec in "+alloc.ID+" at "+wantDir) || !strings.Contains(stderr.String(), "oops") {
		t.Fatalf("exec: code %d stdout %q stderr %q", code, stdout.String(), stderr.String())
	}
	if _, err := b.ExecTask(ctx, api.ExecRequest{AllocID: alloc.ID, Task: "nope", Cmd: []string{"true"}}); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("exec in unknown task: %v", err)
	}
	checkTTYSize(t, b, alloc.ID)

	stopJob(t, b, "web", false)
	stopped := waitAllocStatus(t, b, "web", structs.AllocClientStatusComplete)
	testutil.WaitFor(t, hang, "task process gone", func() bool { return !alive(pid) })
	var types []string
	for _, e := range stopped.TaskStates["t"].Events {
		types = append(types, e.Type)
	}
	if got := strings.Join(types, ","); got != "Received,Task Setup,Started,Killing,Terminated,Killed" {
		t.Fatalf("events = %s", got)
	}
	if job, _ := b.GetJob(ctx, "web"); job.Status != structs.JobStatusDead || !job.Stop {
		t.Fatalf("job after stop: %+v", job)
	}
	// Purge removes the job and, once terminal, its allocations and dirs.
	stopJob(t, b, "web", true)
	testutil.WaitFor(t, hang, "purged allocation removed", func() bool {
		allocs, _ := b.ListAllocations(ctx)
		_, err := os.Stat(filepath.Join(a.Config().DataDir, "alloc", alloc.ID))
		return len(allocs) == 0 && os.IsNotExist(err)
	})
}

func TestRestartPolicyEndsInNotRestarting(t *testing.T) {
	a := startAgent(t, t.TempDir())
	cleanupJob(t, &a, "flaky")
	b := a.Backend()
	restart := `restart {
      attempts = 2
      interval = "10m"
      delay    = "100ms"
      mode     = "fail"
    }`
	if _, err := b.RegisterJob(context.Background(), parseJob(t, shJob("flaky", "echo boom >&2; exit 7", restart)), api.RegisterOptions{}); err != nil {
		t.Fatal(err)
	}
	alloc := waitAllocStatus(t, b, "flaky", structs.AllocClientStatusFailed)
	ts := alloc.TaskStates["t"]
	var types []string
	for _, e := range ts.Events {
		types = append(types, e.Type)
	}
	got := strings.Join(types, ",")
	if !strings.HasSuffix(got, "Started,Terminated,Restarting,Started,Terminated,Restarting,Started,Terminated,Not Restarting") {
		t.Fatalf("events = %s", got)
	}
	last := ts.Events[len(ts.Events)-1]
	if last.DisplayMessage != `Exceeded allowed attempts 2 in interval 10m0s and mode is "fail"` || !ts.Failed || ts.Restarts != 2 {
		t.Fatalf("last event %q failed %v restarts %d", last.DisplayMessage, ts.Failed, ts.Restarts)
	}
	for _, e := range ts.Events {
		if e.Type == structs.TaskTerminated && e.ExitCode != 7 {
			t.Fatalf("exit code = %d", e.ExitCode)
		}
		if e.Type == structs.TaskRestarting && !strings.HasPrefix(e.DisplayMessage, "Task restarting in ") {
			t.Fatalf("restarting message = %q", e.DisplayMessage)
		}
	}
	if logs := readLogs(t, b, alloc.ID, "stderr"); strings.Count(logs, "boom") != 3 {
		t.Fatalf("stderr = %q", logs)
	}
}

func TestAgentRestartRecoversRunningTask(t *testing.T) {
	dir := t.TempDir()
	a := startAgent(t, dir)
	cleanupJob(t, &a, "survivor")
	ctx := context.Background()
	if _, err := a.Backend().RegisterJob(ctx, parseJob(t, shJob("survivor", loopScript, "")), api.RegisterOptions{}); err != nil {
		t.Fatal(err)
	}
	alloc := waitAllocStatus(t, a.Backend(), "survivor", structs.AllocClientStatusRunning)
	pid := taskPID(t, a, alloc)
	nodeID := a.Client().Node().ID

	if err := a.Shutdown(); err != nil {
		t.Fatal(err)
	}
	if !alive(pid) {
		t.Fatal("agent shutdown killed the task")
	}

	a = startAgent(t, dir)
	b := a.Backend()
	if a.Client().Node().ID != nodeID {
		t.Fatalf("node ID changed across restart: %s → %s", nodeID, a.Client().Node().ID)
	}
	// The task is recovered, not started again: same PID, one process.
	testutil.WaitFor(t, hang, "recovered task reported running", func() bool {
		got := onlyAlloc(t, b, "survivor")
		return got.ClientStatus == structs.AllocClientStatusRunning && got.TaskStates["t"].State == structs.TaskStateRunning
	})
	got := onlyAlloc(t, b, "survivor")
	if got.ID != alloc.ID || got.TaskStates["t"].Restarts != 0 {
		t.Fatalf("allocation after restart: %+v", got)
	}
	if !alive(pid) || countMarked("marker-survivor") != 1 {
		t.Fatalf("pid %d alive=%v, %d marked processes (want exactly 1)", pid, alive(pid), countMarked("marker-survivor"))
	}
	for _, e := range got.TaskStates["t"].Events {
		if e.Type == structs.TaskDriverFailure || e.Type == structs.TaskRestarting {
			t.Fatalf("unexpected %s event after recovery: %s", e.Type, e.DisplayMessage)
		}
	}
	// Exec and logs work against the recovered task.
	var out strings.Builder
	if code, err := b.ExecTask(ctx, api.ExecRequest{AllocID: alloc.ID, Cmd: []string{"/bin/sh", "-c", "cat local/pid"}, Stdout: &out}); err != nil || code != 0 || strings.TrimSpace(out.String()) != strconv.Itoa(pid) {
		t.Fatalf("exec after recovery: code %d err %v out %q", code, err, out.String())
	}
	// Stopping the job kills the recovered process.
	stopJob(t, b, "survivor", false)
	waitAllocStatus(t, b, "survivor", structs.AllocClientStatusComplete)
	testutil.WaitFor(t, hang, "recovered task killed", func() bool { return !alive(pid) })
	if n := countMarked("marker-survivor"); n != 0 {
		t.Fatalf("%d marked processes left", n)
	}
}

func TestMissingDriverFailsPlacement(t *testing.T) {
	a := startAgent(t, t.TempDir())
	t.Cleanup(func() { _ = a.Shutdown() })
	b := a.Backend()
	ctx := context.Background()
	job := parseJob(t, `
job "dockerized" {
  group "g" {
    task "t" {
      driver = "docker"
      config { image = "hashicorpdev/counter-api:v3" }
    }
  }
}`)
	res, err := b.RegisterJob(ctx, job, api.RegisterOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eb := b.(api.EvaluationBackend)
	ev, err := eb.GetEvaluation(ctx, res.EvalID)
	if err != nil {
		t.Fatal(err)
	}
	// The docker driver is built in but undetected without a daemon; the
	// reason says so.
	want := "driver docker not available on node test-node: Failed to connect to docker daemon: Cannot connect to the Docker daemon at unix://"
	m := ev.FailedTGAllocs["g"]
	found := 0
	for reason, n := range m.ConstraintFiltered {
		if strings.HasPrefix(reason, want) && strings.HasSuffix(reason, "docker.sock. Is the docker daemon running?") {
			found += n
		}
	}
	if found != 1 || !strings.Contains(ev.StatusDescription, want) {
		t.Fatalf("evaluation = %+v, failed = %+v", ev, m)
	}
	if allocs, _ := b.JobAllocations(ctx, "dockerized"); len(allocs) != 0 {
		t.Fatalf("%d allocations placed", len(allocs))
	}
	evals, err := eb.JobEvaluations(ctx, "dockerized")
	if err != nil || len(evals) != 1 || evals[0].ID != res.EvalID {
		t.Fatalf("job evaluations = %v, %v", evals, err)
	}
}

func TestInvalidJobStoresNothing(t *testing.T) {
	a := startAgent(t, t.TempDir())
	t.Cleanup(func() { _ = a.Shutdown() })
	b := a.Backend()
	before := b.Index()
	job := &structs.Job{ID: "bad", Name: "bad", TaskGroups: []*structs.TaskGroup{{Name: "g", Count: 1,
		Tasks: []*structs.Task{{Name: "t"}}}}} // no driver
	_, err := b.RegisterJob(context.Background(), job, api.RegisterOptions{})
	if !errors.Is(err, api.ErrInvalid) || !errors.Is(err, jobspecs.ErrInvalidJob) {
		t.Fatalf("err = %v, want api.ErrInvalid", err)
	}
	if b.Index() != before {
		t.Fatalf("index moved %d → %d", before, b.Index())
	}
	if jobs, _ := b.ListJobs(context.Background()); len(jobs) != 0 {
		t.Fatalf("jobs stored: %d", len(jobs))
	}
	if _, err := b.GetJob(context.Background(), "bad"); !errors.Is(err, api.ErrNotFound) {
		t.Fatalf("get: %v", err)
	}
}

// checkTTYSize runs `stty size` on a terminal in allocID's task: the size
// the API client sent must reach the driver's terminal through the agent.
func checkTTYSize(t *testing.T, b api.Backend, allocID string) {
	t.Helper()
	resize := make(chan api.TerminalSize, 1)
	resize <- api.TerminalSize{Height: 33, Width: 111}
	close(resize)
	var out strings.Builder
	code, err := b.ExecTask(context.Background(), api.ExecRequest{AllocID: allocID, Task: "t",
		Cmd: []string{"/bin/sh", "-c", "stty size"}, TTY: true, Stdin: strings.NewReader(""),
		Stdout: &out, Resize: resize})
	if err != nil || code != 0 || !strings.Contains(out.String(), "33 111") {
		t.Fatalf("exec on a terminal: code %d, err %v, output %q (want the size 33 111)", code, err, out.String())
	}
}
