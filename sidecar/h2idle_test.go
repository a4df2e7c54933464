package sidecar

import (
	"bytes"
	"errors"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/meshlet/meshlet/internal/testutil"
)

// h2Client is a hand-driven HTTP/2 (prior knowledge h2c) client of web's
// upstream listener: it sends and reads frames only when told, and never
// opens a flow-control window by itself.
type h2Client struct {
	c  net.Conn
	fr *http2.Framer
}

func newH2Client(t *testing.T, m *httpMesh, settings ...http2.Setting) *h2Client {
	t.Helper()
	c, err := net.DialTimeout("tcp", fmt.Sprintf("127.0.0.1:%d", m.webPort), waitTimeout)
	if err != nil {
		t.Fatalf("failed to dial web: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(4 << 10)
	}
	_ = c.SetDeadline(time.Now().Add(waitTimeout))
	fr := http2.NewFramer(c, c)
	fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if _, err := c.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatalf("preface: %v", err)
	}
	if err := fr.WriteSettings(settings...); err != nil {
		t.Fatalf("settings: %v", err)
	}
	return &h2Client{c: c, fr: fr}
}

// open starts stream 1 for method path, ending it with its headers when
// end is set.
func (h *h2Client) open(t *testing.T, method, path string, end bool) {
	t.Helper()
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{{":method", method}, {":scheme", "http"}, {":path", path}, {":authority", "api"}} {
		_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
	}
	if err := h.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndStream: end, EndHeaders: true}); err != nil {
		t.Fatalf("headers: %v", err)
	}
}

// endOfStream reads frames until stream 1 ends: its status and how it
// ended (nil: END_STREAM; the RST_STREAM, GOAWAY or read error otherwise).
func (h *h2Client) endOfStream() (string, error) {
	status := ""
	for {
		f, err := h.fr.ReadFrame()
		if err != nil {
			return status, err
		}
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if f.StreamID == 1 && status == "" {
				status = f.PseudoValue("status")
			}
			if f.StreamID == 1 && f.StreamEnded() {
				return status, nil
			}
		case *http2.DataFrame:
			if f.StreamID == 1 && f.StreamEnded() {
				return status, nil
			}
		case *http2.RSTStreamFrame:
			if f.StreamID == 1 {
				return status, http2.StreamError{StreamID: 1, Code: f.ErrCode}
			}
		case *http2.GoAwayFrame:
			return status, fmt.Errorf("GOAWAY %v", f.ErrCode)
		}
	}
}

// An HTTP/2 client that stops reading a response cannot hold its stream,
// the upstream exchange and their buffers forever: a stream whose window
// the client never opens is reset after the stream idle timeout, and a
// connection whose socket stops draining is closed after as long.
func TestH2StalledReaderReleased(t *testing.T) {
	for _, tc := range []struct {
		name     string
		settings []http2.Setting
		wide     bool // both windows opened wide: the socket blocks, not flow control
	}{
		{name: "window never opened"},
		{name: "socket not drained", settings: []http2.Setting{{ID: http2.SettingInitialWindowSize, Val: 1<<31 - 1}}, wide: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			shortenStreamIdle(t, 300*time.Millisecond)
			started := make(chan struct{}, 1)
			m := newHTTPMeshRoutes(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				started <- struct{}{}
				chunk := make([]byte, 64<<10)
				for i := 0; i < 1024; i++ { // 64 MiB, far more than windows and socket buffers hold
					if _, err := w.Write(chunk); err != nil {
						return
					}
				}
			}), func(rc *routev3.RouteConfiguration) {
				rc.VirtualHosts[0].Routes[0].GetRoute().Timeout = durationpb.New(0) // a stream: no route timeout
			})
			h := newH2Client(t, m, tc.settings...)
			if tc.wide {
				if err := h.fr.WriteWindowUpdate(0, 1<<31-1-65535); err != nil {
					t.Fatalf("window update: %v", err)
				}
			}
			h.open(t, http.MethodGet, "/big", true) // and never read
			<-started
			rqActive := "cluster." + sniFor("api") + ".upstream_rq_active"
			cxActive := "listener." + statName(fmt.Sprintf("127.0.0.1:%d", m.webPort)) + ".downstream_cx_active"
			if n := statValue(t, m.web, rqActive); n != 1 {
				t.Fatalf("%s = %d while the response is being sent, want 1", rqActive, n)
			}
			testutil.WaitFor(t, 10*time.Second, "the stalled stream's upstream request released", func() bool {
				return statValue(t, m.web, rqActive) == 0
			})
			if tc.wide {
				testutil.WaitFor(t, 10*time.Second, "the undrained connection closed", func() bool {
					return statValue(t, m.web, cxActive) == 0
				})
				return
			}
			var se http2.StreamError
			if _, err := h.endOfStream(); !errors.As(err, &se) {
				t.Fatalf("stalled stream ended with %v, want a reset", err)
			}
		})
	}
}

// Progress keeps a stream alive past the idle timeout: a request body sent
// piece by piece for several timeouts (a client-streaming call) is relayed
// and answered.
func TestH2StreamingRequestOutlivesIdle(t *testing.T) {
	shortenStreamIdle(t, 300*time.Millisecond)
	m := newHTTPMeshRoutes(t, http.HandlerFunc(echoHead), func(rc *routev3.RouteConfiguration) {
		rc.VirtualHosts[0].Routes[0].GetRoute().Timeout = durationpb.New(0)
	})
	h := newH2Client(t, m)
	h.open(t, http.MethodPost, "/upload", false)
	for i := 0; i < 12; i++ { // 1.2 s: four timeouts
		time.Sleep(100 * time.Millisecond)
		if err := h.fr.WriteData(1, i == 11, []byte("x")); err != nil {
			t.Fatalf("data: %v", err)
		}
	}
	if status, err := h.endOfStream(); err != nil || status != "200" {
		t.Fatalf("streamed request answered %q, %v; want 200", status, err)
	}
}
