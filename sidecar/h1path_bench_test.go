package sidecar

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"testing"
	"time"
)

// rawApp is an HTTP/1.1 app that allocates nothing per request: it reads
// request heads (no bodies) and answers each with the same fixed response,
// so a benchmark's allocs/op are the sidecars' alone.
type rawApp struct {
	ln   net.Listener
	resp []byte
}

func startRawApp(tb testing.TB, body string) *rawApp {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("listen: %v", err)
	}
	a := &rawApp{ln: ln, resp: []byte("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: " +
		strconv.Itoa(len(body)) + "\r\n\r\n" + body)}
	tb.Cleanup(func() { ln.Close() })
	go a.serve()
	return a
}

func (a *rawApp) serve() {
	for {
		c, err := a.ln.Accept()
		if err != nil {
			return
		}
		go a.serveConn(c)
	}
}

func (a *rawApp) serveConn(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		if err := skipHead(br); err != nil {
			return
		}
		if _, err := c.Write(a.resp); err != nil {
			return
		}
	}
}

// skipHead reads one message head up to its blank line and returns the
// Content-Length it named (-1: none).
func skipHead(br *bufio.Reader) error {
	_, err := readHead(br)
	return err
}

func readHead(br *bufio.Reader) (int, error) {
	length := -1
	for first := true; ; first = false {
		line, err := br.ReadSlice('\n')
		if err != nil {
			return 0, err
		}
		line = bytes.TrimRight(line, "\r\n")
		if len(line) == 0 {
			if first {
				continue
			}
			return length, nil
		}
		const cl = "content-length:"
		if len(line) > len(cl) && bytes.EqualFold(line[:len(cl)], []byte(cl)) {
			n, err := strconv.Atoi(string(bytes.TrimSpace(line[len(cl):])))
			if err != nil {
				return 0, fmt.Errorf("bad content-length %q", line)
			}
			length = n
		}
	}
}

// rawClient sends one pre-formatted keep-alive GET and reads its response
// (head and a Content-Length body) without allocating.
type rawClient struct {
	c    net.Conn
	br   *bufio.Reader
	req  []byte
	body []byte
}

func dialRawClient(tb testing.TB, addr, req string) *rawClient {
	tb.Helper()
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		tb.Fatalf("dial: %v", err)
	}
	tb.Cleanup(func() { c.Close() })
	return &rawClient{c: c, br: bufio.NewReader(c), req: []byte(req), body: make([]byte, 64<<10)}
}

var errRawStatus = errors.New("response is not a 200")

func (rc *rawClient) do() error {
	if _, err := rc.c.Write(rc.req); err != nil {
		return err
	}
	status, err := rc.br.Peek(12)
	if err != nil {
		return err
	}
	if !bytes.Equal(status[9:12], []byte("200")) {
		return fmt.Errorf("%w: %q", errRawStatus, status)
	}
	n, err := readHead(rc.br)
	if err != nil {
		return err
	}
	if n < 0 || n > len(rc.body) {
		return fmt.Errorf("unexpected content-length %d", n)
	}
	_, err = io.ReadFull(rc.br, rc.body[:n])
	return err
}

// BenchmarkH1SteadyState is the HTTP/1.1 hot path of both sidecars in
// steady state: one keep-alive connection, web's outbound listener (RDS
// route, X-Forwarded-*, upstream mTLS pool) -> api's public listener (mTLS,
// network ext_authz once per connection, HTTP connection manager) -> an
// app that allocates nothing, driven by a client that allocates nothing.
// allocs/op and B/op are therefore the two sidecars' cost per request.
func BenchmarkH1SteadyState(b *testing.B) {
	app := startRawApp(b, `{"count":1}`)
	m := newL7Mesh(b, []l7BackendSpec{{cluster: subsetCluster("v1"), addr: app.ln.Addr().String()}},
		apiRoutes(clusterRoute("/", subsetCluster("v1"), nil)), l7Options{})
	cl := dialRawClient(b, fmt.Sprintf("127.0.0.1:%d", m.webPort),
		"GET /api/items?page=2 HTTP/1.1\r\nHost: api\r\nUser-Agent: bench\r\nAccept: */*\r\nX-User: alice\r\n\r\n")
	for i := 0; i < 50; i++ { // warm the pools and the upstream connection
		if err := cl.do(); err != nil {
			b.Fatalf("warm-up request: %v", err)
		}
	}
	b.ReportAllocs()
	before := cpuTime(b)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := cl.do(); err != nil {
			b.Fatalf("request %d: %v", i, err)
		}
	}
	b.StopTimer()
	b.ReportMetric(float64((cpuTime(b)-before).Microseconds())/float64(b.N), "cpu-µs/req")
}

// h1PathAllocBudget is what both sidecars may allocate per request on the
// HTTP/1.1 steady-state path: each copies the request and the response
// head into one string (2 × 2), the server's sidecar appends the client to
// X-Forwarded-For (1) and crypto/tls allocates a reader per record read
// (2); one more for what the runtime and the ADS streams allocate meanwhile.
const h1PathAllocBudget = 8

// TestH1SteadyStateAllocs holds the hot path to its allocation budget
// (BenchmarkH1SteadyState's allocs/op, as a test: allocation counts do not
// depend on the machine's speed).
func TestH1SteadyStateAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two sidecars and a control plane")
	}
	if raceEnabled {
		t.Skip("the race detector changes what escapes to the heap; this runs in the tier without it")
	}
	app := startRawApp(t, `{"count":1}`)
	m := newL7Mesh(t, []l7BackendSpec{{cluster: subsetCluster("v1"), addr: app.ln.Addr().String()}},
		apiRoutes(clusterRoute("/", subsetCluster("v1"), nil)), l7Options{})
	cl := dialRawClient(t, fmt.Sprintf("127.0.0.1:%d", m.webPort),
		"GET /api/items?page=2 HTTP/1.1\r\nHost: api\r\nUser-Agent: bench\r\nAccept: */*\r\nX-User: alice\r\n\r\n")
	var err error
	do := func() {
		if err == nil {
			err = cl.do()
		}
	}
	for i := 0; i < 50; i++ { // warm the pools and the upstream connection
		do()
	}
	allocs := testing.AllocsPerRun(500, do)
	if err != nil {
		t.Fatalf("request: %v", err)
	}
	t.Logf("%.1f allocations per request, both sidecars", allocs)
	if allocs > h1PathAllocBudget {
		t.Fatalf("%.1f allocations per request through both sidecars, budget %d", allocs, h1PathAllocBudget)
	}
}
