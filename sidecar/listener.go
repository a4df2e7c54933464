package sidecar

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"maps"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/go-hclog"
)

const (
	handshakeTimeout = 10 * time.Second
	// maxDownstreamConns bounds open downstream connections per proxy (two
	// goroutines each at most).
	maxDownstreamConns = 16384
)

// listenerState is what a connection needs from its listener, fixed at
// accept time.
type listenerState struct {
	cfg     *listenerConfig
	tlsConf *tls.Config // nil: plaintext
	// byServerName, for a listener whose chain is chosen by TLS server
	// name, holds each chain's state (its cfg has that one chain).
	byServerName map[string]*listenerState
	authzStats   *authzStats
	tcpStats     *tcpStats
	httpStats    *httpStats

	// conns are the connections accepted under this state; when LDS
	// replaces the state they are drained (HTTP ones are told to close,
	// all are closed after the drain timeout).
	conns    connSet
	draining atomic.Bool
	// httpConns are the HTTP connections among conns (*h1conn keys), so
	// a drain can close the idle keep-alive ones at once.
	httpConns sync.Map
}

// drain waits up to timeout for the state's connections, then closes the
// rest; no connection can join it afterwards.
func (st *listenerState) drain(timeout time.Duration) {
	st.draining.Store(true)
	st.httpConns.Range(func(k, _ any) bool {
		k.(*h1conn).closeIfIdle()
		return true
	})
	st.conns.wait(timeout)
	st.conns.closeAll()
}

// listener is the runtime of one named listener. Its state is replaced in
// place when LDS changes it: new connections get the new filter chain while
// the old state's connections drain.
type listener struct {
	name  string
	addr  string
	p     *Proxy
	log   hclog.Logger
	stats *listenerStats
	state atomic.Pointer[listenerState]
	entry *entry // applied entry; ADS loop only

	ctx    context.Context // cancelled when the listener is gone
	cancel context.CancelFunc
}

// socket is one bound address. Its accept loop hands connections to the
// listener that currently owns the address.
type socket struct {
	addr    string
	ln      net.Listener
	owner   atomic.Pointer[listener]
	started bool
	done    chan struct{}
}

// listenerManager binds sockets and runs listeners. Its maps are guarded by
// mu (ADS loop, admin reads, Close).
type listenerManager struct {
	p       *Proxy
	mu      sync.Mutex
	sockets map[string]*socket
	running map[string]*listener
	closed  bool
	wg      sync.WaitGroup // listener drains in progress
}

func newListenerManager(p *Proxy) *listenerManager {
	return &listenerManager{p: p, sockets: map[string]*socket{}, running: map[string]*listener{}}
}

// prepare binds the addresses of an LDS set that are not bound yet, so a set
// that cannot be served is rejected (NACKed) before anything changes. On
// error every socket it bound is closed again.
func (m *listenerManager) prepare(lds map[string]*entry) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	var bound []string
	owners := map[string]string{}
	for _, e := range lds {
		addr := e.cfg.(*listenerConfig).addr
		if other, dup := owners[addr]; dup {
			m.releaseLocked(bound)
			return fmt.Errorf("listeners %q and %q both bind %s", other, e.name, addr)
		}
		owners[addr] = e.name
		if _, ok := m.sockets[addr]; ok {
			continue
		}
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			m.releaseLocked(bound)
			return fmt.Errorf("listener %q: failed to bind %s: %w", e.name, addr, err)
		}
		m.sockets[addr] = &socket{addr: addr, ln: ln, done: make(chan struct{})}
		bound = append(bound, addr)
	}
	return nil
}

// releaseLocked closes sockets prepare bound for a rejected set.
func (m *listenerManager) releaseLocked(addrs []string) {
	for _, a := range addrs {
		m.sockets[a].ln.Close()
		delete(m.sockets, a)
	}
}

// reconcile makes the running listeners match lds: warm listeners start or
// take their new state, listeners that left LDS stop accepting and drain,
// and sockets nobody wants are closed. It returns the number of listeners
// still warming.
func (m *listenerManager) reconcile(lds map[string]*entry, warm func(*listenerConfig) bool) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.closed {
		return 0
	}
	for name, l := range m.running {
		if e, ok := lds[name]; !ok || e.cfg.(*listenerConfig).addr != l.addr {
			m.removeLocked(l)
		}
	}
	warming := 0
	for name, e := range lds {
		cfg := e.cfg.(*listenerConfig)
		l := m.running[name]
		if l != nil && l.entry.cfg == e.cfg {
			l.entry = e // re-sent unchanged: only the version moved
			continue
		}
		if !warm(cfg) {
			warming++
			continue
		}
		if l == nil {
			l = m.newListener(name, cfg.addr)
			m.running[name] = l
		}
		s := m.sockets[cfg.addr]
		if s == nil {
			m.p.log.Error("listener has no bound socket", "listener", name, "addr", cfg.addr)
			continue
		}
		l.entry = e
		if old := l.state.Swap(m.p.buildListenerState(cfg)); old != nil {
			m.wg.Add(1)
			go func() {
				defer m.wg.Done()
				old.drain(m.p.cfg.DrainTimeout)
			}()
		}
		s.owner.Store(l)
		if !s.started {
			s.started = true
			go m.serve(s)
		}
		m.p.log.Debug("listener active", "listener", name, "addr", cfg.addr, "version", e.version)
	}
	wanted := map[string]bool{}
	for _, e := range lds {
		wanted[e.cfg.(*listenerConfig).addr] = true
	}
	for addr, s := range m.sockets {
		if !wanted[addr] {
			m.closeSocketLocked(s)
		}
	}
	return warming
}

func (m *listenerManager) newListener(name, addr string) *listener {
	ctx, cancel := context.WithCancel(context.Background())
	return &listener{
		name: name, addr: addr, p: m.p, log: m.p.log.With("listener", name),
		stats: newListenerStats(m.p.stats, addr), ctx: ctx, cancel: cancel,
	}
}

// removeLocked stops l from getting new connections and drains it in the
// background: open connections are closed after the drain timeout.
func (m *listenerManager) removeLocked(l *listener) {
	delete(m.running, l.name)
	if s, ok := m.sockets[l.addr]; ok && s.owner.Load() == l {
		s.owner.Store(nil)
	}
	m.p.log.Info("listener removed, draining", "listener", l.name, "addr", l.addr)
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		l.drain(m.p.cfg.DrainTimeout)
	}()
}

func (m *listenerManager) closeSocketLocked(s *socket) {
	s.ln.Close()
	delete(m.sockets, s.addr)
	if s.owner.Load() != nil {
		s.owner.Store(nil)
	}
}

// serve is a socket's accept loop.
func (m *listenerManager) serve(s *socket) {
	defer close(s.done)
	var delay time.Duration
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors or similar: back off, keep serving.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			m.p.log.Warn("failed to accept a connection", "addr", s.addr, "error", err)
			time.Sleep(delay)
			continue
		}
		delay = 0
		l := s.owner.Load()
		if l == nil {
			c.Close()
			continue
		}
		if !m.p.acquireConn() {
			l.stats.cxOverflow.Add(1)
			c.Close()
			continue
		}
		go l.handle(c)
	}
}

// closeAll stops every listener and socket and waits up to the drain timeout
// for open connections, then closes them.
func (m *listenerManager) closeAll() {
	m.mu.Lock()
	m.closed = true
	var loops []chan struct{}
	for _, s := range m.sockets {
		if s.started {
			loops = append(loops, s.done)
		}
		m.closeSocketLocked(s)
	}
	running := m.running
	m.running = map[string]*listener{}
	m.mu.Unlock()
	var wg sync.WaitGroup
	for _, l := range running {
		wg.Add(1)
		go func() {
			defer wg.Done()
			l.drain(m.p.cfg.DrainTimeout)
		}()
	}
	wg.Wait()
	m.wg.Wait()
	for _, done := range loops {
		<-done
	}
}

// active reports the names and applied entries of running listeners.
func (m *listenerManager) active() map[string]*entry {
	m.mu.Lock()
	defer m.mu.Unlock()
	out := make(map[string]*entry, len(m.running))
	for name, l := range m.running {
		out[name] = l.entry
	}
	return out
}

// drain waits for l's connections to finish, up to timeout, then closes
// whatever is left.
func (l *listener) drain(timeout time.Duration) {
	if st := l.state.Load(); st != nil {
		st.drain(timeout)
	}
	l.cancel()
}

// connSet tracks a listener's open connections.
type connSet struct {
	mu sync.Mutex
	// m maps each connection to what else closing it ends (nil: nothing):
	// a TCP relay's upstream side, which a goroutine blocked on it would
	// otherwise keep open.
	m      map[net.Conn]func()
	closed bool
	idle   chan struct{} // closed when the set becomes empty while waited on
}

func (s *connSet) add(c net.Conn) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	if s.m == nil {
		s.m = map[net.Conn]func(){}
	}
	s.m[c] = nil
	return true
}

// onClose makes closing c (closeAll) call fn too; false when c is not in
// the set or the set was closed already.
func (s *connSet) onClose(c net.Conn, fn func()) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if _, ok := s.m[c]; !ok || s.closed {
		return false
	}
	s.m[c] = fn
	return true
}

func (s *connSet) remove(c net.Conn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, c)
	if len(s.m) == 0 && s.idle != nil {
		close(s.idle)
		s.idle = nil
	}
}

// wait blocks until the set is empty or timeout passes; it reports whether
// the set emptied.
func (s *connSet) wait(timeout time.Duration) bool {
	s.mu.Lock()
	if len(s.m) == 0 {
		s.mu.Unlock()
		return true
	}
	if s.idle == nil {
		s.idle = make(chan struct{})
	}
	idle := s.idle
	s.mu.Unlock()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case <-idle:
		return true
	case <-t.C:
		return false
	}
}

func (s *connSet) closeAll() {
	s.mu.Lock()
	s.closed = true
	conns := make(map[net.Conn]func(), len(s.m))
	maps.Copy(conns, s.m)
	s.mu.Unlock()
	for c, also := range conns {
		c.Close()
		if also != nil {
			also()
		}
	}
}
