package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"slices"
	"strings"
	"sync"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"
)

// Endpoint change to every proxy: a watcher allocation on each client
// node (c1, c2, c3) whose sidecar has an upstream to bm-x; bm-x runs on
// c1 and is scaled 1 → 2 → 1 (edgeRounds times). Each change is timed
// from the job update until the servers' catalog (the server agent's
// /v1/health/connect/bm-x) and until each watcher's sidecar (its admin
// /clusters on 127.0.0.2:19001, read from inside the allocation's
// namespace) lists the new set of endpoints.

const (
	edgeRounds  = 3
	edgeTimeout = 30 * time.Second
	edgePoll    = 10 * time.Millisecond
	edgeService = "bm-x"
)

// edgeJob is the endpoint-change job with count instances of bm-x.
func edgeJob(count int) string {
	return fmt.Sprintf(`job "bm-edge" {
  datacenters = ["dc1"]

  group "x" {
    count = %d
%s
    network {
      mode = "bridge"
    }

    service {
      name = "bm-x"
      port = "9100"

      connect {
        sidecar_service {}
      }
    }

    task "app" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "echo", "-listen", "127.0.0.1:9100"]
      }
    }
  }

  group "w" {
    count = 3
%s
    constraint {
      operator = "distinct_hosts"
      value    = "true"
    }

    network {
      mode = "bridge"
    }

    service {
      name = "bm-w"
      port = "7000"

      connect {
        sidecar_service {
          proxy {
            upstreams {
              destination_name = "bm-x"
              local_bind_port  = 8100
            }
          }
        }
      }
    }

    task "app" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "echo", "-listen", "127.0.0.1:7000"]
      }
    }
  }
}
`, count, onNode("c1"), onNode("c1|c2|c3"))
}

// clusterEndpoint is one line of the proxy admin's /clusters page.
var clusterEndpoint = regexp.MustCompile(`(?m)^([a-z0-9-]+)\.default\.dc1\.internal\.[^:]+::([0-9.]+:\d+)::health_flags::(\S+)$`)

// ParseClusterEndpoints returns service's endpoints (address:port → health
// flags) from a proxy admin /clusters page.
func ParseClusterEndpoints(page, service string) map[string]string {
	eps := map[string]string{}
	for _, m := range clusterEndpoint.FindAllStringSubmatch(page, -1) {
		if m[1] == service {
			eps[m[2]] = m[3]
		}
	}
	return eps
}

// edgeWatcher is one place the change must reach.
type edgeWatcher struct {
	name string // "servers' catalog" or the node's name
	hc   *http.Client
	url  string
	// count reads the page and returns how many endpoints are listed
	// (all healthy for a sidecar).
	count func(body []byte) int
}

// edgeResult is the per-watcher times of every change.
type edgeResult struct {
	names []string                   // watchers in report order (servers' catalog first)
	times map[string][]time.Duration // job update → watcher shows the change
	err   error
}

// endpointChanges runs the job and edgeRounds scale-ups and -downs.
func (r *Runner) endpointChanges(ctx context.Context, c *meshCluster) *edgeResult {
	res := &edgeResult{times: map[string][]time.Duration{}}
	job, err := c.registerHCL(edgeJob(1))
	if err != nil {
		res.err = err
		return res
	}
	allocs, err := c.running(ctx, "bm-edge", 4, 90*time.Second)
	if err != nil {
		res.err = err
		return res
	}
	watchers, err := c.edgeWatchers(allocs)
	if err != nil {
		res.err = err
		return res
	}
	for _, w := range watchers {
		res.names = append(res.names, w.name)
	}
	if _, err := waitEdge(ctx, watchers, 1, time.Now()); err != nil {
		res.err = fmt.Errorf("before the first change: %w", err)
		return res
	}
	for i := 0; i < edgeRounds && res.err == nil; i++ {
		for _, count := range []int{2, 1} {
			for _, tg := range job.TaskGroups {
				if *tg.Name == "x" {
					tg.Count = ptr(count)
				}
			}
			start := time.Now()
			if _, _, err := c.server.api.Jobs().Register(job, nil); err != nil {
				res.err = fmt.Errorf("failed to scale bm-x to %d: %w", count, err)
				break
			}
			got, err := waitEdge(ctx, watchers, count, start)
			if err != nil {
				res.err = fmt.Errorf("scale to %d: %w", count, err)
				break
			}
			for k, d := range got {
				res.times[k] = append(res.times[k], d)
			}
		}
	}
	return res
}

// edgeWatchers are the servers' catalog and each watcher allocation's
// sidecar admin, read from inside their namespaces.
func (c *meshCluster) edgeWatchers(allocs []*nomadapi.AllocationListStub) ([]*edgeWatcher, error) {
	out := []*edgeWatcher{{name: "servers' catalog", hc: nsHTTPClient(NetnsPath(c.server.NS)),
		url: "http://127.0.0.1:8500/v1/health/connect/" + edgeService, count: countCatalog}}
	hostNS := map[string]string{}
	for _, cl := range c.clients {
		hostNS[cl.Name] = cl.NS
	}
	for _, al := range allocs {
		if al.TaskGroup != "w" {
			continue
		}
		ns, err := c.net.AttachAlloc(al.ID, hostNS[al.NodeName])
		if err != nil {
			return nil, err
		}
		out = append(out, &edgeWatcher{name: al.NodeName, hc: nsHTTPClient(NetnsPath(ns)),
			url: "http://127.0.0.2:19001/clusters", count: countHealthy})
	}
	slices.SortFunc(out[1:], func(a, b *edgeWatcher) int { return strings.Compare(a.name, b.name) })
	if len(out) != 1+meshClients {
		return nil, fmt.Errorf("watcher allocations on %d nodes, want %d", len(out)-1, meshClients)
	}
	return out, nil
}

// countCatalog counts the entries of a /v1/health/connect answer (-1 when
// it is no JSON list).
func countCatalog(body []byte) int {
	var entries []json.RawMessage
	if err := json.Unmarshal(body, &entries); err != nil {
		return -1
	}
	return len(entries)
}

// countHealthy counts bm-x's endpoints on a /clusters page, -1 when any
// is not healthy.
func countHealthy(body []byte) int {
	eps := ParseClusterEndpoints(string(body), edgeService)
	for _, f := range eps {
		if f != "healthy" {
			return -1
		}
	}
	return len(eps)
}

// waitEdge polls every watcher until it lists want endpoints and returns
// how long after start each did.
func waitEdge(ctx context.Context, ws []*edgeWatcher, want int, start time.Time) (map[string]time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, edgeTimeout)
	defer cancel()
	var mu sync.Mutex
	got := map[string]time.Duration{}
	errs := make([]error, len(ws))
	var wg sync.WaitGroup
	for i, w := range ws {
		wg.Add(1)
		go func() {
			defer wg.Done()
			last := "no answer"
			for {
				n, err := w.poll(ctx)
				if err == nil && n == want {
					mu.Lock()
					got[w.name] = time.Since(start)
					mu.Unlock()
					return
				}
				if err != nil {
					last = err.Error()
				} else {
					last = fmt.Sprintf("%d endpoints", n)
				}
				if !sleepCtx(ctx, edgePoll) {
					errs[i] = fmt.Errorf("%s did not list %d endpoints of %s within %s (last: %s)", w.name, want, edgeService, edgeTimeout, last)
					return
				}
			}
		}()
	}
	wg.Wait()
	return got, firstErr(errs...)
}

func (w *edgeWatcher) poll(ctx context.Context) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, w.url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := w.hc.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("GET %s: %s", w.url, resp.Status)
	}
	return w.count(b), nil
}

// edgeFigures: per node, job update → the node's proxy has the change
// (baseline: → the servers' catalog has it), and the slowest node.
func edgeFigures(e *edgeResult) []*Figure {
	unit := "ms"
	if e.err != nil {
		return []*Figure{NotMeasured("endpoint change → every proxy on 3 nodes (slowest node, median)", unit, e.err.Error(), nil)}
	}
	catalog := e.times[e.names[0]]
	base := ptr(ms(medianDur(catalog)))
	var figs []*Figure
	slowest := make([]time.Duration, len(catalog))
	for _, node := range e.names[1:] {
		ts := e.times[node]
		for i, d := range ts {
			slowest[i] = max(slowest[i], d)
		}
		f := Measured(fmt.Sprintf("endpoint change → proxy on %s (median)", node), unit, ms(medianDur(ts)), base, nil)
		f.Note = fmt.Sprintf("per change: %s ms; minus the servers' catalog: %s ms.", fmtDurs(ts), fmtDurs(subDurs(ts, catalog)))
		if node == "c1" {
			f.Note += " c1 runs bm-x: its own registrations reach its control plane from its agent, not through the servers."
		}
		figs = append(figs, f)
	}
	f := Measured("endpoint change → every proxy on 3 nodes (slowest node, median)", unit, ms(medianDur(slowest)), base, nil)
	f.Note = fmt.Sprintf("%d changes (bm-x on c1 scaled 1 → 2 → 1, %d times), each timed from the job update (API answer: "+
		"plan committed) until the sidecar's admin /clusters lists the new set, all healthy (polled every %s from inside "+
		"the allocation's namespace). Baseline: until the server agent's /v1/health/connect/bm-x lists it (the servers' "+
		"catalog, per change: %s ms); the baseline includes scheduling, the task's start and the node's registration. "+
		"Slowest node per change: %s ms.", len(slowest), edgeRounds, edgePoll, fmtDurs(catalog), fmtDurs(slowest))
	return append(figs, f)
}

func medianDur(ds []time.Duration) time.Duration {
	xs := make([]float64, len(ds))
	for i, d := range ds {
		xs[i] = float64(d)
	}
	return time.Duration(median(xs))
}

func subDurs(a, b []time.Duration) []time.Duration {
	out := make([]time.Duration, 0, len(a))
	for i := range a {
		if i < len(b) {
			out = append(out, a[i]-b[i])
		}
	}
	return out
}

// fmtDurs prints durations as comma-separated milliseconds.
func fmtDurs(ds []time.Duration) string {
	s := ""
	for i, d := range ds {
		if i > 0 {
			s += ", "
		}
		s += fmtNum(ms(d))
	}
	return s
}
