package bench

import (
	"context"
	"fmt"
	"time"
)

// Cross-node latency and max rps: service bm-srv (demo-app counting, L7
// sidecar) on c2, a client group with an upstream to it on c1; fortio
// runs in the client allocation's namespace against the upstream
// (client sidecar → c2's address:host port → server sidecar → app) and,
// as the baseline, straight to the same app through a host port mapping
// on c2 (c1's allocation → c2's address:host port → the app).

const (
	xnodeFixedDuration = 4 * time.Second
	xnodeMaxDuration   = 3 * time.Second
	xnodeUpstream      = 8001
	xnodeApp           = 9001
)

// onNode is a group constraint to the nodes whose name matches re.
func onNode(re string) string {
	return fmt.Sprintf(`    constraint {
      attribute = "${node.unique.name}"
      operator  = "regexp"
      value     = "^(%s)$"
    }
`, re)
}

// latencyJob is the cross-node latency job.
func latencyJob() string {
	return fmt.Sprintf(`job "bm-lat" {
  datacenters = ["dc1"]

  group "srv" {
%s
    network {
      mode = "bridge"
      port "direct" {
        to = %[2]d
      }
    }

    service {
      name = "bm-srv"
      port = "%[2]d"

      connect {
        sidecar_service {
          proxy {
            config {
              protocol = "http"
            }
          }
        }
      }
    }

    task "app" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "counting", "-listen", "0.0.0.0:%[2]d"]
      }
    }
  }

  group "cli" {
%s
    network {
      mode = "bridge"
    }

    service {
      name = "bm-cli"
      port = "7000"

      connect {
        sidecar_service {
          proxy {
            upstreams {
              destination_name = "bm-srv"
              local_bind_port  = %d

              config {
                protocol = "http"
              }
            }
          }
        }
      }
    }

    task "idle" {
      driver = "raw_exec"

      config {
        command = "${attr.meshlet.binary}"
        args    = ["demo-app", "echo", "-listen", "127.0.0.1:7000"]
      }
    }
  }
}
`, onNode("c2"), xnodeApp, onNode("c1"), xnodeUpstream)
}

// xnodeResult is what the latency phase measured.
type xnodeResult struct {
	base, mesh       FortioResult // medians at the fixed rate
	maxBase, maxMesh []float64    // per-round max rps
	direct           string       // the baseline's URL
	err, maxErr      error
}

// crossNodeLoad runs the latency job and the interleaved fortio rounds.
func (r *Runner) crossNodeLoad(ctx context.Context, c *meshCluster) *xnodeResult {
	res := &xnodeResult{}
	fail := func(err error) *xnodeResult { res.err, res.maxErr = err, err; return res }
	if r.opts.Fortio == "" {
		return fail(fmt.Errorf("%w: fortio (scripts/bench.sh installs it)", ErrMissingTool))
	}
	if _, err := c.registerHCL(latencyJob()); err != nil {
		return fail(err)
	}
	allocs, err := c.running(ctx, "bm-lat", 2, 90*time.Second)
	if err != nil {
		return fail(err)
	}
	var cliID, srvID string
	for _, al := range allocs {
		if al.TaskGroup == "cli" {
			cliID = al.ID
		} else {
			srvID = al.ID
		}
	}
	port, err := c.hostPort(srvID, "direct")
	if err != nil {
		return fail(err)
	}
	ns, err := c.net.AttachAlloc(cliID, c.clients[0].NS)
	if err != nil {
		return fail(err)
	}
	res.direct = fmt.Sprintf("http://%s:%d/", c.clients[1].IP, port)
	mesh := fmt.Sprintf("http://127.0.0.1:%d/", xnodeUpstream)
	for _, u := range []string{res.direct, mesh} {
		if err := r.waitPassing(ctx, ns, u); err != nil {
			return fail(err)
		}
	}
	fo := Fortio{Bin: r.opts.Fortio, Netns: ns, Dir: r.scratch}
	var bs, gs []FortioResult
	for i := 0; i < dataRounds; i++ {
		spec := LoadSpec{QPS: fixedRate, Conns: fixedConns, Duration: xnodeFixedDuration, KeepAlive: true, URL: res.direct}
		b, errB := fo.Run(ctx, spec)
		spec.URL = mesh
		g, errM := fo.Run(ctx, spec)
		if err := firstErr(errM, errB); err != nil {
			res.err = err
			break
		}
		bs, gs = append(bs, b), append(gs, g)
	}
	res.base, res.mesh = medianFortio(bs), medianFortio(gs)
	for i := 0; i < dataRounds; i++ {
		spec := LoadSpec{QPS: 0, Conns: maxConns, Duration: xnodeMaxDuration, KeepAlive: true, URL: res.direct}
		b, errB := fo.Run(ctx, spec)
		spec.URL = mesh
		g, errM := fo.Run(ctx, spec)
		if err := firstErr(errM, errB); err != nil {
			res.maxErr = err
			break
		}
		res.maxBase, res.maxMesh = append(res.maxBase, b.ActualQPS), append(res.maxMesh, g.ActualQPS)
	}
	return res
}

// hostPort is the host port mapped to allocation allocID's port label.
func (c *meshCluster) hostPort(allocID, label string) (int, error) {
	al, _, err := c.server.api.Allocations().Info(allocID, nil)
	if err != nil {
		return 0, fmt.Errorf("failed to read allocation %s: %w", allocID[:8], err)
	}
	if al.AllocatedResources != nil {
		for _, p := range al.AllocatedResources.Shared.Ports {
			if p.Label == label && p.Value > 0 {
				return p.Value, nil
			}
		}
	}
	return 0, fmt.Errorf("allocation %s has no host port %q", allocID[:8], label)
}

// xnodeFigures are the latency and max-rps figures, mesh against direct.
func xnodeFigures(x *xnodeResult) []*Figure {
	names := []string{"cross-node HTTP latency p50 at 1,000 rps", "cross-node HTTP latency p99 at 1,000 rps"}
	var figs []*Figure
	for i, name := range names {
		if x.err != nil {
			figs = append(figs, NotMeasured(name, "ms", x.err.Error(), nil))
			continue
		}
		v, b := x.mesh.P50, x.base.P50
		if i == 1 {
			v, b = x.mesh.P99, x.base.P99
		}
		f := Measured(name, "ms", v*1000, ptr(b*1000), nil)
		f.Note = fmt.Sprintf("added %.3f ms. Median of %d interleaved direct/mesh pairs of %s at %d rps over %d keep-alive "+
			"connections (the mesh runs held %.0f rps, the direct %.0f). Direct: %s.", (v-b)*1000, dataRounds,
			xnodeFixedDuration, fixedRate, fixedConns, x.mesh.ActualQPS, x.base.ActualQPS, x.direct)
		figs = append(figs, f)
	}
	name := fmt.Sprintf("cross-node HTTP max rps at %d connections", maxConns)
	if x.maxErr != nil {
		return append(figs, NotMeasured(name, "1/s", x.maxErr.Error(), nil))
	}
	f := Measured(name, "1/s", median(x.maxMesh), ptr(median(x.maxBase)), nil)
	f.Note = fmt.Sprintf("fortio as fast as it goes for %s per point. %s", xnodeMaxDuration, ratioRange(x.maxMesh, x.maxBase))
	return append(figs, f)
}
