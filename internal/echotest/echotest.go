// Package echotest is the TCP echo app that sidecar and mesh tests put
// behind a proxy: it listens on 127.0.0.1, greets each connection with a
// line naming the instance (when given one), then echoes, and counts
// accepted connections and received bytes. It is for tests only.
//
// An App is safe for concurrent use; its counters may be read at any time.
package echotest

import (
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
)

// App is a running echo app.
type App struct {
	greeting string
	ln       net.Listener
	conns    atomic.Int64
	bytes    atomic.Int64

	mu     sync.Mutex
	open   map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// Start starts an app on 127.0.0.1:0 and closes it at the test's cleanup.
// A non-empty greeting is sent as "<greeting>\n" to each new connection.
func Start(t testing.TB, greeting string) *App {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("failed to listen for the echo app: %v", err)
	}
	a := &App{greeting: greeting, ln: ln, open: map[net.Conn]struct{}{}}
	a.wg.Add(1)
	go a.serve()
	t.Cleanup(a.Close)
	return a
}

// Addr is the app's "127.0.0.1:port".
func (a *App) Addr() string { return a.ln.Addr().String() }

// Port is the app's port.
func (a *App) Port() int { return a.ln.Addr().(*net.TCPAddr).Port }

// Conns is the number of connections accepted so far.
func (a *App) Conns() int64 { return a.conns.Load() }

// Bytes is the number of bytes received so far.
func (a *App) Bytes() int64 { return a.bytes.Load() }

// Close stops the app: its port refuses connections and open ones end.
// It is idempotent.
func (a *App) Close() {
	a.mu.Lock()
	a.closed = true
	a.ln.Close()
	for c := range a.open {
		c.Close()
	}
	a.mu.Unlock()
	a.wg.Wait()
}

func (a *App) serve() {
	defer a.wg.Done()
	for {
		c, err := a.ln.Accept()
		if err != nil {
			return
		}
		a.mu.Lock()
		if a.closed {
			a.mu.Unlock()
			c.Close()
			return
		}
		a.open[c] = struct{}{}
		a.wg.Add(1)
		a.mu.Unlock()
		a.conns.Add(1)
		go a.handle(c)
	}
}

func (a *App) handle(c net.Conn) {
	defer a.wg.Done()
	defer func() {
		a.mu.Lock()
		delete(a.open, c)
		a.mu.Unlock()
		c.Close()
	}()
	if a.greeting != "" {
		if _, err := io.WriteString(c, a.greeting+"\n"); err != nil {
			return
		}
	}
	buf := make([]byte, 32<<10)
	for {
		n, err := c.Read(buf)
		if n > 0 {
			a.bytes.Add(int64(n))
			if _, werr := c.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
