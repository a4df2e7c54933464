// Package bench owns `make bench`: it runs meshlet's benchmarks on this
// machine, each figure side by side with its baseline in the same run, and
// writes bench/results.json (raw figures) and bench/RESULTS.md (one table
// per area, with the machine's facts, ratios, targets and what the profiles
// showed).
//
// These areas are measured:
//   - control plane: the xds, authz packages' Go benchmarks (run with
//     `go test -bench` and parsed), an in-process intention-change
//     measurement against the composed control plane, and the agent's
//     memory per connected proxy measured with the control plane and the
//     simulated proxies in two processes (bench/cmd/xdsload, started twice);
//   - allocation lifecycle: the cni package's setup/teardown benchmark
//     against bare namespace creation, and the real agent running the
//     dashboard job (with and without connect) and 100 allocations;
//   - data plane: the real agent running bench/input/mesh.hcl, with fortio
//     and iperf3 run inside the client allocation's namespace against its
//     upstream listeners (mesh) and the servers' namespace addresses
//     (direct), and through two peer proxy pairs, HAProxy and nginx
//     (Debian's packages, configured from a bench CA by bench/peers_conf.go
//     and run in the same two namespaces as the sidecars). The four arms
//     share one measurement (dpArm, bench/dataplane_measure.go): every
//     block runs each arm in every round, the order rotated each round,
//     after a bounded wait for a quiet machine; the "… vs <peer>" rows
//     judge per-round median meshlet/peer ratios (dataplane_verdict.go).
//     Sidecar CPU and memory (PSS, VmRSS, RssAnon) come from /proc;
//   - L7 routing: the sidecar's per-request CPU with a 5-route router and
//     a 2-way split against plain HTTP forwarding (sidecar.BenchmarkRouted
//     and BenchmarkPlain, interleaved rounds of the same run, target ratio
//     ≤ 1.25), the router alone (BenchmarkRouteMatch), the xDS build and
//     size for one proxy with 1,000 routed upstreams
//     (xds.BenchmarkCompileRoutes1000) and configentry's compile of 1,000
//     chains and one write check against them (bench/l7.go);
//   - ingress gateway: the real agent running bench/input/gateway.hcl, with
//     fortio inside an idle client allocation's namespace against the HTTP
//     app's allocation address (direct) and the ingress gateway's (an
//     `http` listener routing by Host through the app's sidecar), the two
//     paths interleaved like the data plane's arms: p50/p99 at a fixed
//     rate and max rps (bench/gateway.go);
//   - faults: the agent under injected failures (bench/faults.go);
//   - cluster: placement throughput, plan commit latency, failover and
//     heartbeat capacity with one server and simulated client nodes;
//   - cluster mesh: real agents (one server, three clients) in their own
//     network namespaces: cross-node latency and max rps through two
//     sidecars against the direct cross-node path, the time for an
//     endpoint change to reach the proxies on every node, and the feed's
//     bytes and messages per second with 1,000 proxies on one client (one
//     stream per agent, against one per proxy).
//
// `-areas` runs only some areas; their sections then replace the same
// sections of the results already in the output directory (the others,
// and the machine table, stay those of the earlier run; each replaced
// section says when and at which commit it was measured).
//
// Every area degrades on its own: a piece that is missing or broken yields
// "not measured: <reason>" figures instead of failing the run. Load is
// bounded in count and time and only ever targets 127.0.0.0/8 or addresses
// inside namespaces meshlet created.
//
// Concurrency: a Runner is used by one goroutine; areas run one after the
// other so they do not disturb each other's figures. The helpers that parse
// and render (ParseGoBench, ParseFortio, ParseIperf, Render...) are pure.
package bench
