package sidecar

import (
	"fmt"
	"io"
	"maps"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"github.com/envoyproxy/go-control-plane/pkg/cache/types"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/meshlet/meshlet/internal/echotest"
	"github.com/meshlet/meshlet/internal/testutil"
)

func tcpProxyFilterIdle(t testing.TB, statPrefix, cluster string, idle time.Duration) *listenerv3.Filter {
	return &listenerv3.Filter{Name: "envoy.filters.network.tcp_proxy", ConfigType: &listenerv3.Filter_TypedConfig{TypedConfig: mustPack(t, &tcpproxyv3.TcpProxy{
		StatPrefix: statPrefix, ClusterSpecifier: &tcpproxyv3.TcpProxy_Cluster{Cluster: cluster}, IdleTimeout: durationpb.New(idle),
	})}}
}

// expectIdleClose keeps c busy for longer than the idle timeout (a line
// every 100 ms, so it is never idle), then silent: the relay must stay
// open while busy and close within a few timeouts of silence.
func expectIdleClose(t *testing.T, c *lineConn, idle time.Duration) {
	t.Helper()
	for i := range 8 {
		if i > 0 {
			time.Sleep(idle / 3)
		}
		if got := c.exchange(t, fmt.Sprint("busy ", i)); got != fmt.Sprint("busy ", i) {
			t.Fatalf("echo %d = %q", i, got)
		}
	}
	start := time.Now() // the last byte
	_ = c.SetReadDeadline(time.Now().Add(10 * idle))
	if _, err := c.r.ReadByte(); err != io.EOF {
		t.Fatalf("read after %s of silence = %v, want EOF (the idle relay closed)", time.Since(start), err)
	}
	if took := time.Since(start); took < idle || took > 4*idle {
		t.Fatalf("the idle relay closed %s after the last byte, want between %s and %s", took, idle, 4*idle)
	}
}

// tcp_proxy's idle_timeout closes a relay that moved no byte either way
// for that long, and never a busy one: over the splice path (plain TCP
// both sides) and with PlainIO's io.Copy.
func TestTCPProxyIdleTimeout(t *testing.T) {
	const idle = 300 * time.Millisecond
	for _, plain := range []bool{false, true} {
		t.Run(fmt.Sprintf("plain_io=%v", plain), func(t *testing.T) {
			t.Setenv(EnvPlainIO, map[bool]string{false: "", true: "1"}[plain])
			cp := newControlPlane(t)
			app := echotest.Start(t, "")
			port := freePort(t)
			v := cp.set("p", map[string][]types.Resource{
				typeListener: {upstreamListener("x", port, tcpProxyFilterIdle(t, "idle", "local_app", idle))},
				typeCluster:  {localAppCluster(app.Addr())},
			})
			p := startProxy(t, "p", "x", cp.tcpAddr, true)
			waitAccepted(t, p, typeListener, v)
			expectIdleClose(t, dialLine(t, fmt.Sprintf("127.0.0.1:%d", port)), idle)
			testutil.WaitFor(t, waitTimeout, "tcp.idle.idle_timeout at 1", func() bool { return statValue(t, p, "tcp.idle.idle_timeout") == 1 })
		})
	}
}

// The same through both sidecars of the mesh: web's upstream listener
// relays plain TCP to mTLS (the buffered TLS path).
func TestTCPProxyIdleTimeoutOverTLS(t *testing.T) {
	const idle = 300 * time.Millisecond
	m := newMesh(t, meshOptions{})
	res := maps.Clone(m.webResources())
	res[typeListener] = []types.Resource{upstreamListener("db", m.webPort, tcpProxyFilterIdle(t, "upstream.db", sniFor("db"), idle))}
	waitAccepted(t, m.web, typeListener, m.cp.set(m.web.cfg.ProxyID, res))
	c, id := m.greet(t)
	if id != "db-0" {
		t.Fatalf("greeting = %q", id)
	}
	expectIdleClose(t, c, idle)
	testutil.WaitFor(t, waitTimeout, "tcp.upstream.db.idle_timeout at 1", func() bool {
		return statValue(t, m.web, "tcp.upstream.db.idle_timeout") == 1
	})
}

// A relay that never moved a byte either way idles out too (Envoy's
// idle timer starts with the connection): over the buffered TLS path, a
// client that connects and stays silent to a silent server is closed.
func TestTCPProxyIdleTimeoutWithoutTraffic(t *testing.T) {
	const idle = 300 * time.Millisecond
	m := newMesh(t, meshOptions{greetless: true})
	res := maps.Clone(m.webResources())
	res[typeListener] = []types.Resource{upstreamListener("db", m.webPort, tcpProxyFilterIdle(t, "upstream.db", sniFor("db"), idle))}
	waitAccepted(t, m.web, typeListener, m.cp.set(m.web.cfg.ProxyID, res))
	c := dialLine(t, m.webAddr())
	start := time.Now()
	_ = c.SetReadDeadline(time.Now().Add(10 * idle))
	if _, err := c.r.ReadByte(); err != io.EOF {
		t.Fatalf("read after %s of silence = %v, want EOF (the idle relay closed)", time.Since(start), err)
	}
	// The proxy's idle clock starts at its accept, a moment before start:
	// the lower bound only shows the relay was not closed at once (the
	// read deadline bounds the other side).
	if took := time.Since(start); took < idle/2 {
		t.Fatalf("the idle relay closed %s after it opened, before its %s idle timeout", took, idle)
	}
	testutil.WaitFor(t, waitTimeout, "tcp.upstream.db.idle_timeout at 1", func() bool {
		return statValue(t, m.web, "tcp.upstream.db.idle_timeout") == 1
	})
}
