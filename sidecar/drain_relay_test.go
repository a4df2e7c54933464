package sidecar

import (
	"errors"
	"fmt"
	"net"
	"os"
	"testing"
	"time"

	"github.com/envoyproxy/go-control-plane/pkg/cache/types"

	"github.com/meshlet/meshlet/internal/testutil"
)

// silentUpstream accepts connections and never reads from, writes to or
// closes them.
func silentUpstream(t *testing.T) (net.Listener, chan net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted := make(chan net.Conn, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted <- c
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		for {
			select {
			case c := <-accepted:
				c.Close()
			default:
				return
			}
		}
	})
	return ln, accepted
}

// A drained TCP relay closes its upstream connection too, even when no
// goroutine reads the client side any more: the client half-closed and
// the app stays silent, or the relay is blocked writing to an app that
// stopped reading. Envoy closes both sides of a drained tcp_proxy.
func TestDrainClosesTCPRelayUpstream(t *testing.T) {
	for _, halfClose := range []bool{true, false} {
		t.Run(fmt.Sprintf("half_close=%v", halfClose), func(t *testing.T) {
			cp := newControlPlane(t)
			up, accepted := silentUpstream(t)
			port := freePort(t)
			res := map[string][]types.Resource{
				typeListener: {upstreamListener("x", port, tcpProxyFilter(t, "v1", "local_app"))},
				typeCluster:  {localAppCluster(up.Addr().String())},
			}
			v := cp.set("p", res)
			p := startProxy(t, "p", "x", cp.tcpAddr, true)
			waitAccepted(t, p, typeListener, v)
			c, err := net.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", port))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			upc := <-accepted
			defer upc.Close()
			if halfClose {
				_, _ = c.Write([]byte("hello"))
				_ = c.(*net.TCPConn).CloseWrite()
			} else {
				// More than the sockets hold: the relay blocks writing up.
				go func() {
					buf := make([]byte, 1<<20)
					for range 64 {
						if _, err := c.Write(buf); err != nil {
							return
						}
					}
				}()
			}
			active := "cluster.local_app.upstream_cx_active"
			testutil.WaitFor(t, waitTimeout, "the relay's upstream connection", func() bool { return statValue(t, p, active) == 1 })
			time.Sleep(100 * time.Millisecond) // the relay is now blocked where the case puts it
			res[typeListener] = []types.Resource{upstreamListener("x", port, tcpProxyFilter(t, "v2", "local_app"))}
			v = cp.set("p", res)
			waitAccepted(t, p, typeListener, v)
			testutil.WaitFor(t, waitTimeout, "the drained relay's upstream connection closed", func() bool { return statValue(t, p, active) == 0 })
			_ = upc.SetReadDeadline(time.Now().Add(waitTimeout))
			buf := make([]byte, 64<<10)
			for {
				_, err := upc.Read(buf)
				if errors.Is(err, os.ErrDeadlineExceeded) {
					t.Fatal("the app never saw the drained relay's upstream connection close")
				}
				if err != nil {
					break // EOF or reset: the app sees the close
				}
			}
		})
	}
}
