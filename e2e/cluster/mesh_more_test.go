package cluster

import (
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"
)

// edit replaces each old (pairs: old, new, ...) once in job, failing t
// when job (named what) no longer has it.
func edit(t *testing.T, what, job string, pairs ...string) string {
	t.Helper()
	for i := 0; i+1 < len(pairs); i += 2 {
		if !strings.Contains(job, pairs[i]) {
			t.Fatalf("%s changed: it has no %q to edit", what, pairs[i])
		}
		job = strings.Replace(job, pairs[i], pairs[i+1], 1)
	}
	return job
}

// onNodes is a group constraint to the nodes whose name matches re.
func onNodes(re string) string {
	return fmt.Sprintf("    constraint {\n      attribute = \"${node.unique.name}\"\n      operator  = \"regexp\"\n      value     = \"^(%s)$\"\n    }\n\n", re)
}

// countdashJob is the shipped example jobspecs/countdash.hcl with the api
// pinned to apiNode and the dashboard to dashNode.
func countdashJob(t *testing.T, apiNode, dashNode string) string {
	t.Helper()
	src, err := os.ReadFile(filepath.Join("..", "..", "jobspecs", "countdash.hcl"))
	if err != nil {
		t.Fatal(err)
	}
	return edit(t, "jobspecs/countdash.hcl", string(src),
		"  group \"api\" {\n", "  group \"api\" {\n"+onNodes(apiNode),
		"  group \"dashboard\" {\n", "  group \"dashboard\" {\n"+onNodes(dashNode))
}

// scaleMeshJob is meshJob with count instances of service-b spread over
// the nodes whose name matches the alternatives bNodes ("c1|c2") instead
// of two on distinct hosts.
func scaleMeshJob(t *testing.T, aNode, bNodes string, count int) string {
	t.Helper()
	return edit(t, "meshJob", meshJob(aNode, bNodes), "count = 2", fmt.Sprintf("count = %d", count),
		"constraint {\n      operator = \"distinct_hosts\"\n      value    = \"true\"\n    }",
		"spread {\n      attribute = \"${node.unique.name}\"\n    }")
}

// slowMeshJob is scaleMeshJob whose service-b app listens only a second
// after it starts, as a real service that loads before it serves, and
// has a TCP check, as such a service declares: an instance takes traffic
// only once its check passes (Consul's alias check on its sidecar).
func slowMeshJob(t *testing.T, aNode, bNodes string, count int) string {
	t.Helper()
	job := edit(t, "scaleMeshJob", scaleMeshJob(t, aNode, bNodes, count),
		`command = "${attr.meshlet.binary}"
        args    = ["demo-app", "hello",`,
		`command = "/bin/sh"
        args    = ["-c", "sleep 1; exec \"$0\" \"$@\"", "${attr.meshlet.binary}", "demo-app", "hello",`)
	return edit(t, "scaleMeshJob", job, `      port = "9001"
`, `      port = "9001"

      check {
        name     = "b-listening"
        type     = "tcp"
        interval = "1s"
        timeout  = "1s"
      }
`)
}

// proberJob is sleepJob in bridge mode (no service, no sidecar), one
// allocation on each of c1 and c2, to probe other allocations from.
func proberJob(t *testing.T) string {
	t.Helper()
	return edit(t, "sleepJob", sleepJob("prober", 2, true),
		"  group \"g\" {\n", "  group \"g\" {\n"+onNodes("c1|c2")+"    network {\n      mode = \"bridge\"\n    }\n")
}

// placement is where an allocation runs.
type placement struct {
	ID, Node string
}

// placements maps running allocations' names to their IDs and nodes.
func (c *cluster) placements(via *agent, allocs []*nomadapi.AllocationListStub) map[string]placement {
	names := c.nodeNames(via)
	out := map[string]placement{}
	for _, al := range allocs {
		out[al.Name] = placement{ID: al.ID, Node: names[al.NodeID]}
	}
	return out
}

// execIn runs argv inside task of allocation allocID (alloc exec through
// via) and returns its combined output.
func (c *cluster) execIn(via *agent, allocID, task string, argv ...string) (string, error) {
	return c.CLI(via, append([]string{"alloc", "exec", "-task", task, allocID}, argv...)...)
}

// withToken adds the ACL token to a Consul-shaped API URL (?token=, which
// Consul accepts as X-Consul-Token).
func withToken(url, token string) string {
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	return url + sep + "token=" + token
}

// getOnHost GETs url (http://127.0.0.1:8500/...) inside host's namespace.
func getOnHost(host *agent, url string) (string, error) {
	out, err := exec.Command("ip", "netns", "exec", host.NS, host.argv[0], "demo-app", "get", "-timeout", "5s", withToken(url, host.token)).CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("GET %s on %s: %w", url, host.Name, err)
	}
	return string(out), nil
}

// catalogEntry is one instance of /v1/health/connect/<service>.
type catalogEntry struct {
	Node    struct{ Node, Address string }
	Service struct {
		ID      string
		Address string
		Port    int
	}
}

// connectCatalog reads host's Consul-shaped /v1/health/connect/service.
func connectCatalog(host *agent, service string) ([]catalogEntry, error) {
	out, err := getOnHost(host, "http://127.0.0.1:8500/v1/health/connect/"+service)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, out)
	}
	var entries []catalogEntry
	if err := json.Unmarshal([]byte(out), &entries); err != nil {
		return nil, fmt.Errorf("decode %s: %w", out, err)
	}
	return entries, nil
}

var clusterHost = regexp.MustCompile(`(?m)^([a-z0-9-]+)\.default\.dc1\.internal\.[^:]+::([0-9.]+:\d+)::health_flags::(\S+)$`)

// sidecarEndpoints reads the /clusters admin page of the first sidecar in
// allocation allocID (from inside task) and returns the endpoints of
// service's cluster with their health flags.
func (c *cluster) sidecarEndpoints(via *agent, allocID, task, service string) (map[string]string, string, error) {
	out, err := c.execIn(via, allocID, task, c.bin, "demo-app", "get", "-timeout", "2s", "http://127.0.0.2:19001/clusters")
	if err != nil {
		return nil, out, err
	}
	eps := map[string]string{}
	for _, m := range clusterHost.FindAllStringSubmatch(out, -1) {
		if m[1] == service {
			eps[m[2]] = m[3]
		}
	}
	return eps, out, nil
}

func healthy(eps map[string]string) []string {
	var out []string
	for addr, flag := range eps {
		if flag == "healthy" {
			out = append(out, addr)
		}
	}
	sort.Strings(out)
	return out
}

// dashboardAPI asks the dashboard (from inside its allocation) for the
// counter it reads through the mesh: {"count":N,"hostname":API-ALLOC-ID}.
func (c *cluster) dashboardAPI(via *agent, allocID string) (count int, host string, err error) {
	out, err := c.execIn(via, allocID, "dashboard", c.bin, "demo-app", "get", "-timeout", "2s", "http://127.0.0.1:9002/api")
	if err != nil {
		return 0, "", fmt.Errorf("%w: %s", err, strings.TrimSpace(out))
	}
	var got struct {
		Count    int
		Hostname string
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		return 0, "", fmt.Errorf("decode dashboard answer %q: %w", out, err)
	}
	return got.Count, got.Hostname, nil
}

func httpGet(url string) (string, error) {
	resp, err := (&http.Client{Timeout: 3 * time.Second}).Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(b), err
}

// TestCountdashAcrossNodes runs countdash with the api on c1 and the
// dashboard on c2: the dashboard reads the api's counter through its
// upstream, whose only endpoint is the api's sidecar at c1's address.
func TestCountdashAcrossNodes(t *testing.T) {
	c := newCluster(t)
	s1 := c.AddServer("s1", 2, 1)
	c1, c2 := c.AddClient("c1", 5, s1), c.AddClient("c2", 6, s1)
	c.WaitNodesReady(60*time.Second, s1, c1, c2)

	c.RunJobCLI(s1, "countdash", countdashJob(t, "c1", "c2"))
	allocs, _ := c.WaitRunning(s1, "countdash", 2, 60*time.Second)
	pl := c.placements(s1, allocs)
	api, dash := pl["countdash.api[0]"], pl["countdash.dashboard[0]"]
	if api.Node != "c1" || dash.Node != "c2" {
		t.Fatalf("placements %v, want the api on c1 and the dashboard on c2", pl)
	}

	var first int
	took := poll(t, 30*time.Second, "the dashboard reading the api's counter through the mesh", func() (bool, string) {
		n, host, err := c.dashboardAPI(s1, dash.ID)
		if err != nil {
			return false, err.Error()
		}
		if host != api.ID {
			t.Fatalf("the dashboard's counter came from %q, want the api allocation %s", host, api.ID)
		}
		first = n
		return true, ""
	})
	figure(t, "countdash: first dashboard answer across nodes after the allocations ran", took)

	last := first
	for i := 0; i < 5; i++ {
		n, host, err := c.dashboardAPI(s1, dash.ID)
		if err != nil || host != api.ID || n <= last {
			t.Fatalf("dashboard answer %d: count %d from %q (%v), want a count above %d from %s", i, n, host, err, last, api.ID)
		}
		last = n
	}
	// As the single-node test, the page through the static port 9002, here
	// at c2's address from the test process.
	page, err := httpGet(fmt.Sprintf("http://%s:9002/", c2.IP))
	if err != nil || !regexp.MustCompile(`Count: \d+`).MatchString(page) {
		t.Fatalf("dashboard page at c2's static port: %v\n%s", err, page)
	}

	eps, raw, err := c.sidecarEndpoints(s1, dash.ID, "dashboard", "count-api")
	if err != nil {
		t.Fatalf("dashboard sidecar /clusters: %v\n%s", err, raw)
	}
	if h := healthy(eps); len(h) != 1 || !strings.HasPrefix(h[0], c1.IP+":") {
		t.Fatalf("the dashboard's sidecar routes count-api to %v, want one healthy endpoint at c1's address %s:\n%s", eps, c1.IP, raw)
	}
	t.Logf("counter %d..%d read across nodes; count-api endpoint %v", first, last, eps)
}

// TestMeshIsolationAcrossNodes checks what the mesh keeps closed: the
// loopback listeners of an allocation from a neighbour allocation on the
// same node, the sidecar's public listener to callers without a cluster
// certificate, and a node's leaf API for a service it does not run.
func TestMeshIsolationAcrossNodes(t *testing.T) {
	c := newCluster(t)
	s1 := c.AddServer("s1", 2, 1)
	c1, c2 := c.AddClient("c1", 5, s1), c.AddClient("c2", 6, s1)
	c.WaitNodesReady(60*time.Second, s1, c1, c2)

	c.RunJobCLI(s1, "hello-mesh", scaleMeshJob(t, "c1", "c2", 1))
	c.RunJobCLI(s1, "prober", proberJob(t))
	mesh, _ := c.WaitRunning(s1, "hello-mesh", 2, 60*time.Second)
	probers, _ := c.WaitRunning(s1, "prober", 2, 60*time.Second)
	pl := c.placements(s1, append(mesh, probers...))
	a, b := pl["hello-mesh.service-a[0]"], pl["hello-mesh.service-b[0]"]
	if a.Node != "c1" || b.Node != "c2" {
		t.Fatalf("placements %v, want service-a on c1 and service-b on c2", pl)
	}
	poll(t, 30*time.Second, "service-a answering through the mesh", func() (bool, string) {
		res := c.answers(s1, a.ID, 1, 0)
		return res[0] == "b-0", res[0]
	})

	proberOn := map[string]string{pl["prober.g[0]"].Node: pl["prober.g[0]"].ID, pl["prober.g[1]"].Node: pl["prober.g[1]"].ID}
	checkNeighbourProbes(t, c, s1, proberOn["c1"], a.ID, "service-a", []int{9000, 8080})
	checkNeighbourProbes(t, c, s1, proberOn["c2"], b.ID, "service-b", []int{9001})

	leafA := checkLeafScope(t, c1)
	checkPublicListener(t, c, c1, c2, leafA)
}

// allocAddr returns allocation id's bridge address and the port its
// sidecar's public listener has inside the allocation.
func allocAddr(t *testing.T, via *agent, id, service string) (string, int) {
	t.Helper()
	al, _, err := via.API().Allocations().Info(id, nil)
	if err != nil {
		t.Fatalf("allocation %s: %v", id, err)
	}
	if al.NetworkStatus == nil || al.NetworkStatus.Address == "" || al.AllocatedResources == nil {
		t.Fatalf("allocation %s has no bridge address: %+v", id, al.NetworkStatus)
	}
	for _, p := range al.AllocatedResources.Shared.Ports {
		if p.Label == "connect-proxy-"+service {
			if p.To > 0 {
				return al.NetworkStatus.Address, p.To
			}
			return al.NetworkStatus.Address, p.Value
		}
	}
	t.Fatalf("allocation %s has no port connect-proxy-%s: %+v", id, service, al.AllocatedResources.Shared.Ports)
	return "", 0
}

// probe opens a TCP connection from inside prober to addr and reports
// whether it was accepted (anything after the connect is irrelevant: a
// TLS listener closes on the plain text message).
func (c *cluster) probe(via *agent, prober, addr string) (bool, string) {
	out, err := c.execIn(via, prober, "sleep", c.bin, "demo-app", "tcp-client", "-addr", addr, "-timeout", "2s",
		"-message", "GET / HTTP/1.0\r\n\r\n")
	out = strings.TrimSpace(out)
	return err == nil || !strings.Contains(out, "failed to connect"), out
}

// checkNeighbourProbes dials, from the prober allocation on the same node,
// the bridge address of allocation target: its sidecar's public listener
// accepts (the control: the bridge path works), the loopback-only ports
// closed must refuse or time out.
func checkNeighbourProbes(t *testing.T, c *cluster, via *agent, prober, target, service string, closed []int) {
	t.Helper()
	ip, public := allocAddr(t, via, target, service)
	if ok, out := c.probe(via, prober, fmt.Sprintf("%s:%d", ip, public)); !ok {
		t.Fatalf("control: a neighbour allocation cannot reach %s's sidecar listener %s:%d: %s", service, ip, public, out)
	}
	for _, port := range closed {
		addr := fmt.Sprintf("%s:%d", ip, port)
		if ok, out := c.probe(via, prober, addr); ok {
			t.Errorf("a neighbour allocation reached %s's loopback port at %s: %s", service, addr, out)
		} else {
			t.Logf("neighbour -> %s %s: %s", service, addr, out)
		}
	}
}

// leafCert is the part of /v1/agent/connect/ca/leaf/<service> used here.
type leafCert struct {
	CertPEM, PrivateKeyPEM, ServiceURI string
}

// checkLeafScope asks c1 (which runs service-a only) for the leaves of
// service-b (refused by the servers) and service-a (served), and returns
// service-a's.
func checkLeafScope(t *testing.T, c1 *agent) leafCert {
	t.Helper()
	if out, err := getOnHost(c1, "http://127.0.0.1:8500/v1/agent/connect/ca/leaf/service-b"); err == nil {
		t.Errorf("c1 runs no service-b, yet its agent served service-b's leaf:\n%.300s", out)
	} else {
		t.Logf("c1's leaf of service-b refused: %v: %s", err, strings.TrimSpace(out))
	}
	out, err := getOnHost(c1, "http://127.0.0.1:8500/v1/agent/connect/ca/leaf/service-a")
	if err != nil {
		t.Fatalf("c1's leaf of service-a (which it runs): %v\n%s", err, out)
	}
	var leaf leafCert
	if err := json.Unmarshal([]byte(out), &leaf); err != nil || leaf.CertPEM == "" || leaf.PrivateKeyPEM == "" {
		t.Fatalf("c1's leaf of service-a: %v\n%.300s", err, out)
	}
	return leaf
}

// checkPublicListener dials service-b's sidecar on c2 at the address c1's
// catalog lists, from the test process over the test bridge: a TLS client
// without a certificate, with a self-signed certificate (same SPIFFE ID
// as service-a) or with an agent's RPC certificate gets no answer; service-a's real leaf gets b-0's.
func checkPublicListener(t *testing.T, c *cluster, c1, c2 *agent, leafA leafCert) {
	t.Helper()
	entries, err := connectCatalog(c1, "service-b")
	if err != nil || len(entries) != 1 || entries[0].Service.Address != c2.IP {
		t.Fatalf("c1's catalog of service-b: %v, %+v, want one sidecar at c2's address %s", err, entries, c2.IP)
	}
	addr := net.JoinHostPort(entries[0].Service.Address, fmt.Sprint(entries[0].Service.Port))
	roots := meshRoots(t, c1)

	genuine, err := tls.X509KeyPair([]byte(leafA.CertPEM), []byte(leafA.PrivateKeyPEM))
	if err != nil {
		t.Fatalf("service-a's leaf: %v", err)
	}
	if ans, err := tlsGet(addr, clientTLS(roots, &genuine)); err != nil || !strings.Contains(ans, "b-0") {
		t.Fatalf("control: service-a's leaf on %s: %v, answer %q, want b-0's", addr, err, ans)
	}
	forged := foreignCert(t, leafA.ServiceURI)
	agentCert, err := tls.LoadX509KeyPair(filepath.Join(c.certDir, "global-client-meshlet-c1.pem"),
		filepath.Join(c.certDir, "global-client-meshlet-c1-key.pem"))
	if err != nil {
		t.Fatalf("c1's agent certificate: %v", err)
	}
	for name, cert := range map[string]*tls.Certificate{"no client certificate": nil,
		"a self-signed certificate with service-a's SPIFFE ID":          &forged,
		"c1's agent certificate (the cluster's RPC CA, not the mesh's)": &agentCert} {
		if ans, err := tlsGet(addr, clientTLS(roots, cert)); err == nil {
			t.Errorf("service-b's sidecar at %s answered a client with %s: %q", addr, name, ans)
		} else {
			t.Logf("%s refused by %s: %v", name, addr, err)
		}
	}
}

// TestEndpointChangeReachesAllNodes scales service-b from 2 to 4
// instances spread over c1 and c2, then back to 1, and measures how long
// service-a's sidecar on c1 takes to route to all of them and to drop the
// removed ones after the servers' catalog lost them. The new instances'
// apps listen a second after they start: no request may reach one before
// its check passes (without the check, each new instance failed its share
// of the requests, as it would with Consul and Envoy).
func TestEndpointChangeReachesAllNodes(t *testing.T) {
	c := newCluster(t)
	s1 := c.AddServer("s1", 2, 1)
	c1, c2 := c.AddClient("c1", 5, s1), c.AddClient("c2", 6, s1)
	c.WaitNodesReady(60*time.Second, s1, c1, c2)

	c.RunJobCLI(s1, "hello-mesh", slowMeshJob(t, "c1", "c1|c2", 2))
	allocs, _ := c.WaitRunning(s1, "hello-mesh", 3, 60*time.Second)
	aID := c.placements(s1, allocs)["hello-mesh.service-a[0]"].ID
	c.waitEndpoints(t, s1, aID, 2, 30*time.Second)
	poll(t, 30*time.Second, "service-a answering through the mesh", func() (bool, string) {
		res := c.answers(s1, aID, 1, 0)
		return strings.HasPrefix(res[0], "b-"), res[0]
	})

	// Scale service-b from 2 to 4, as the test asks.
	updated := time.Now()
	c.RunJobCLI(s1, "hello-mesh", slowMeshJob(t, "c1", "c1|c2", 4))
	allocs, ran := c.WaitRunning(s1, "hello-mesh", 5, 60*time.Second)
	var bAllocs []*nomadapi.AllocationListStub
	for _, al := range allocs {
		if al.TaskGroup == "service-b" {
			bAllocs = append(bAllocs, al)
		}
	}
	if bOn := perNode(bAllocs, c.nodeNames(s1)); bOn["c1"] == 0 || bOn["c2"] == 0 {
		t.Fatalf("service-b's 4 instances not spread over c1 and c2: %v", bOn)
	}
	eps := c.waitEndpoints(t, s1, aID, 4, 30*time.Second)
	took := time.Since(updated)
	figure(t, "scale-up 2 to 4: job update to service-a's sidecar routing to all 4 instances", took)
	figure(t, "scale-up 2 to 4: 4 instances running to service-a's sidecar routing to all", took-ran)
	for _, ep := range eps {
		if !strings.HasPrefix(ep, c1.IP+":") && !strings.HasPrefix(ep, c2.IP+":") {
			t.Errorf("service-b endpoint %s is at neither node's address (%s, %s)", ep, c1.IP, c2.IP)
		}
	}
	// Every instance answers soon (a new endpoint's share ramps up), and
	// no request fails meanwhile.
	seen := map[string]int{}
	poll(t, 20*time.Second, "every service-b instance answering through service-a's sidecar", func() (bool, string) {
		raw := c.answers(s1, aID, 16, 0)
		res := tally(raw)
		if res["fail"] > 0 {
			t.Fatalf("16 requests after the scale-up: %v, want no failure (endpoints %v); answers: %q", res, eps, raw)
		}
		for k, v := range res {
			seen[k] += v
		}
		return seen["b-0"] > 0 && seen["b-1"] > 0 && seen["b-2"] > 0 && seen["b-3"] > 0, fmt.Sprint(seen)
	})
	checkScaleDown(t, c, s1, aID)
}

// checkScaleDown scales service-b back to 1 and measures when the
// servers' catalog (s1's connect API) and then service-a's sidecar drop
// the removed instances, with service-a's requests going on meanwhile.
func checkScaleDown(t *testing.T, c *cluster, s1 *agent, aID string) {
	t.Helper()
	loop := make(chan string, 1)
	go func() {
		out, err := c.execIn(s1, aID, "service-a", c.bin, "demo-app", "get", "-timeout", "1s", "-n", "150", "-every", "20ms", "http://127.0.0.1:8080/")
		if err != nil {
			out = fmt.Sprintf("request loop: %v\n%s", err, out)
		}
		loop <- out
	}()
	time.Sleep(500 * time.Millisecond)
	down := time.Now()
	dereg := make(chan time.Duration, 1)
	go func() {
		for time.Since(down) < 30*time.Second {
			if e, err := connectCatalog(s1, "service-b"); err == nil && len(e) == 1 {
				dereg <- time.Since(down)
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		dereg <- -1
	}()
	c.RunJobCLI(s1, "hello-mesh", slowMeshJob(t, "c1", "c1|c2", 1))
	c.waitEndpoints(t, s1, aID, 1, 30*time.Second)
	gone := time.Since(down)
	d := <-dereg
	if d < 0 {
		t.Fatalf("s1's catalog still lists more than one service-b instance 30s after the scale-down")
	}
	figure(t, "scale-down: job update to the servers' catalog dropping the instances", d)
	figure(t, "scale-down: servers' catalog to service-a's sidecar dropping the instances", gone-d)
	if gone-d > 10*time.Second {
		t.Errorf("service-a's sidecar dropped the removed instances %s after the servers' catalog, want under 10s", gone-d)
	}
	out := <-loop
	fails := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if !strings.HasPrefix(line, "200 a <- b-") {
			fails++
			t.Logf("during scale-down: %s", line)
		}
	}
	t.Logf("%d of 150 requests during the scale-down failed", fails)
	if res := tally(c.answers(s1, aID, 10, 0)); res["b-0"] != 10 {
		t.Fatalf("10 requests after the scale-down: %v, want all answered by b-0", res)
	}
}

// waitEndpoints waits until service-a's sidecar lists exactly n service-b
// endpoints, all healthy, and returns them.
func (c *cluster) waitEndpoints(t *testing.T, via *agent, aID string, n int, timeout time.Duration) []string {
	t.Helper()
	var h []string
	poll(t, timeout, fmt.Sprintf("%d healthy service-b endpoints in service-a's sidecar", n), func() (bool, string) {
		eps, raw, err := c.sidecarEndpoints(via, aID, "service-a", "service-b")
		if err != nil {
			return false, fmt.Sprintf("%v: %s", err, raw)
		}
		h = healthy(eps)
		return len(eps) == n && len(h) == n, fmt.Sprint(eps)
	})
	return h
}
