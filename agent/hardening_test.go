package agent

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	consul "github.com/hashicorp/consul/api"
	nomad "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/scheduler"
	"github.com/meshlet/meshlet/structs"
)

// send sends one request as a browser (or a careless script) would.
func send(t *testing.T, method, url string, hdr map[string]string, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		if k == "Host" {
			req.Host = v
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, strings.TrimSpace(string(raw))
}

func rawExecJobJSON(t *testing.T, id string) string {
	t.Helper()
	job := &structs.Job{ID: id, Name: id, Type: structs.JobTypeService, TaskGroups: []*structs.TaskGroup{{Name: "g", Count: 1,
		Tasks: []*structs.Task{{Name: "t", Driver: "raw_exec", Config: map[string]any{"command": "/bin/sleep", "args": []string{"600"}}}}}}}
	raw, err := json.Marshal(api.JobRegisterRequest{Job: job})
	if err != nil {
		t.Fatal(err)
	}
	return string(raw)
}

// A web page cannot drive the agent: a cross-origin text/plain POST (what a
// <form> or a no-cors fetch sends) registers no job on :4646 and creates
// no intention on :8500, and a page on a DNS name rebound to 127.0.0.1
// reads no private key. The official clients keep working.
func TestBrowserRequestsRefused(t *testing.T) {
	a := startAgent(t, t.TempDir())
	cleanupJob(t, &a, "pwn")
	nomadURL, consulURL := "http://"+a.HTTPAddr(), "http://"+a.ControlPlane().HTTPAddr()
	evil := map[string]string{"Origin": "http://evil.example", "Content-Type": "text/plain;charset=UTF-8"}
	before := a.Backend().Index()

	if code, msg := send(t, "POST", nomadURL+"/v1/jobs", evil, rawExecJobJSON(t, "pwn")); code != http.StatusForbidden {
		t.Fatalf("cross-origin POST /v1/jobs: %d %s", code, msg)
	}
	noOrigin := map[string]string{"Content-Type": "text/plain"}
	if code, msg := send(t, "PUT", nomadURL+"/v1/job/pwn", noOrigin, rawExecJobJSON(t, "pwn")); code != http.StatusUnsupportedMediaType {
		t.Fatalf("text/plain PUT /v1/job/pwn: %d %s", code, msg)
	}
	rebound := map[string]string{"Host": "evil.example:4646"}
	if code, msg := send(t, "GET", nomadURL+"/v1/jobs", rebound, ""); code != http.StatusMisdirectedRequest {
		t.Fatalf("rebound Host on :4646: %d %s", code, msg)
	}
	if jobs, _ := a.Backend().ListJobs(context.Background()); len(jobs) != 0 || a.Backend().Index() != before {
		t.Fatalf("refused requests stored %d jobs (index %d → %d)", len(jobs), before, a.Backend().Index())
	}

	intention := `{"SourceName":"evil","DestinationName":"db","Action":"allow"}`
	if code, msg := send(t, "POST", consulURL+"/v1/connect/intentions", evil, intention); code != http.StatusForbidden {
		t.Fatalf("cross-origin POST /v1/connect/intentions: %d %s", code, msg)
	}
	if n := len(a.ControlPlane().Intentions.List()); n != 0 {
		t.Fatalf("refused request created %d intentions", n)
	}
	_, port, _ := net.SplitHostPort(a.ControlPlane().HTTPAddr())
	code, msg := send(t, "GET", consulURL+"/v1/agent/connect/ca/leaf/web", map[string]string{"Host": "evil.example:" + port}, "")
	if code != http.StatusMisdirectedRequest || strings.Contains(msg, "PRIVATE KEY") {
		t.Fatalf("rebound Host reading a leaf: %d %q", code, msg)
	}

	nc, err := nomad.NewClient(&nomad.Config{Address: nomadURL})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := nc.Jobs().List(nil); err != nil {
		t.Fatalf("official Nomad client: %v", err)
	}
	cc, err := consul.NewClient(&consul.Config{Address: a.ControlPlane().HTTPAddr()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cc.Connect().IntentionUpsert(&consul.Intention{SourceName: "web", DestinationName: "db", Action: consul.IntentionActionAllow}, nil); err != nil {
		t.Fatalf("official Consul client: %v", err)
	}
	if _, _, err := cc.Agent().ConnectCALeaf("web", nil); err != nil {
		t.Fatalf("official Consul client leaf: %v", err)
	}
}

// Oversized IDs and bodies with trailing data are 400s that store nothing.
func TestAPIBoundsRequests(t *testing.T) {
	a := startAgent(t, t.TempDir())
	t.Cleanup(func() { _ = a.Shutdown() })
	url := "http://" + a.HTTPAddr()
	before := a.Backend().Index()
	long := strings.Repeat("a", 40<<10)
	for _, tc := range []struct{ name, method, path, body string }{
		{"40 KB job ID", "PUT", "/v1/jobs", rawExecJobJSON(t, long)},
		{"40 KB job ID in path", "PUT", "/v1/job/" + long, rawExecJobJSON(t, long)},
		{"40 KB ID read", "GET", "/v1/job/" + long, ""},
		{"40 KB ID stop", "DELETE", "/v1/job/" + long, ""},
		{"trailing object", "PUT", "/v1/jobs", rawExecJobJSON(t, "trail") + `{"Job":{"ID":"other"}}`},
		{"trailing brace", "PUT", "/v1/jobs", rawExecJobJSON(t, "trail") + `}`},
		{"static port 0", "PUT", "/v1/jobs", strings.Replace(rawExecJobJSON(t, "zero"), `"Tasks"`, `"Networks":[{"ReservedPorts":[{"Label":"http","Value":0}]}],"Tasks"`, 1)},
	} {
		code, msg := send(t, tc.method, url+tc.path, nil, tc.body)
		if code != http.StatusBadRequest || strings.Contains(msg, "\n") || len(msg) > 400 {
			t.Errorf("%s: %d %q, want a one-line 400", tc.name, code, msg)
		}
	}
	if jobs, _ := a.Backend().ListJobs(context.Background()); len(jobs) != 0 || a.Backend().Index() != before {
		t.Fatalf("rejected requests stored %d jobs", len(jobs))
	}
}

// No job may take the agent's own ports (HTTP API, Consul-shaped API, xDS)
// or the configured reserved_ports, in host or bridge mode: the placement
// fails with Nomad's "reserved port collision" and nothing is placed.
func TestAgentPortsReserved(t *testing.T) {
	a := startAgentWith(t, t.TempDir(), func(cfg *Config) { cfg.Client.ReservedPorts = "10022,10100-10110" })
	t.Cleanup(func() { _ = a.Shutdown() })
	port := func(addr string) string { _, p, _ := net.SplitHostPort(addr); return p }
	cp := a.ControlPlane()
	eb := a.Backend().(api.EvaluationBackend)
	for _, mode := range []string{"host", "bridge"} {
		for _, p := range []string{port(a.HTTPAddr()), port(cp.HTTPAddr()), port(cp.GRPCAddr()), "10022", "10105"} {
			id := "take-" + mode + "-" + p
			job := parseJob(t, `
job "`+id+`" {
  group "g" {
    network {
      mode = "`+mode+`"
      port "http" { static = `+p+` }
    }
    task "t" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["600"]
      }
    }
  }
}`)
			res, err := a.Backend().RegisterJob(context.Background(), job, api.RegisterOptions{})
			if err != nil {
				t.Fatal(err)
			}
			ev, err := eb.GetEvaluation(context.Background(), res.EvalID)
			if err != nil {
				t.Fatal(err)
			}
			want := "network: reserved port collision http=" + p + " on node test-node"
			if m := ev.FailedTGAllocs["g"]; m == nil || m.ConstraintFiltered[want] != 1 {
				t.Errorf("%s mode, static %s: evaluation %+v, want %q", mode, p, ev, want)
			}
			if allocs, _ := a.Backend().JobAllocations(context.Background(), id); len(allocs) != 0 {
				t.Errorf("%s mode, static %s: %d allocations placed", mode, p, len(allocs))
			}
		}
	}
	node := a.Client().Node()
	if spec := node.Attributes[scheduler.ReservedPortsAttribute]; !strings.Contains(spec, "10100-10110") {
		t.Fatalf("node reserved ports %q", spec)
	}
}
