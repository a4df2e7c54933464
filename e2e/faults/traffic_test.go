package faults

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"

	"github.com/meshlet/meshlet/e2e/framework"
)

// netnsPath is where meshlet bind-mounts an allocation's namespace.
func netnsPath(allocID string) string { return filepath.Join("/var/run/netns", allocID) }

// dialIn opens a TCP connection from inside the namespace at path. The
// socket belongs to that namespace for its whole life, whichever thread
// uses it afterwards.
func dialIn(path, addr string, timeout time.Duration) (net.Conn, error) {
	var c net.Conn
	err := ns.WithNetNSPath(path, func(ns.NetNS) error {
		var err error
		c, err = net.DialTimeout("tcp", addr, timeout)
		return err
	})
	return c, err
}

// echoOnce sends one message through addr inside the namespace on a new
// connection and checks it comes back.
func echoOnce(path, addr string, seq int) error {
	c, err := dialIn(path, addr, 2*time.Second)
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(3 * time.Second))
	msg := []byte("ping " + strconv.Itoa(seq) + "\n")
	if _, err := c.Write(msg); err != nil {
		return fmt.Errorf("write: %w", err)
	}
	got := make([]byte, len(msg))
	if _, err := io.ReadFull(c, got); err != nil {
		return fmt.Errorf("read: %w", err)
	}
	if !bytes.Equal(got, msg) {
		return fmt.Errorf("echo mismatch: got %q, want %q", got, msg)
	}
	return nil
}

// traffic sends echo requests on new connections at a fixed pace until
// stopped or until max requests or maxDur have passed (bounded load).
type traffic struct {
	ok, failed int
	errs       []string
	failedAt   []time.Time
	mu         sync.Mutex
	stop       chan struct{}
	done       chan struct{}
}

func startTraffic(path, addr string, interval time.Duration, max int, maxDur time.Duration) *traffic {
	tr := &traffic{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(tr.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		end := time.After(maxDur)
		for i := 0; i < max; i++ {
			select {
			case <-tr.stop:
				return
			case <-end:
				return
			case <-tick.C:
			}
			err := echoOnce(path, addr, i)
			tr.mu.Lock()
			if err != nil {
				tr.failed++
				tr.failedAt = append(tr.failedAt, time.Now())
				if len(tr.errs) < 10 {
					tr.errs = append(tr.errs, time.Now().Format("15:04:05.000")+" "+err.Error())
				}
			} else {
				tr.ok++
			}
			tr.mu.Unlock()
		}
	}()
	return tr
}

// Stop ends the load and returns the counts.
func (tr *traffic) Stop() (ok, failed int, errs []string) {
	close(tr.stop)
	<-tr.done
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.ok, tr.failed, tr.errs
}

// FailedOutside counts the failures outside [from, to].
func (tr *traffic) FailedOutside(from, to time.Time) int {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	n := 0
	for _, at := range tr.failedAt {
		if at.Before(from) || at.After(to) {
			n++
		}
	}
	return n
}

// Counts returns the counts so far.
func (tr *traffic) Counts() (ok, failed int) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.ok, tr.failed
}

// procsIn returns pid → command line of the processes whose network
// namespace is the one at path.
func procsIn(t *testing.T, path string) map[int]string {
	t.Helper()
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatalf("stat %s: %v", path, err)
	}
	want := fmt.Sprintf("net:[%d]", st.Ino)
	entries, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	out := map[int]string{}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		link, err := os.Readlink(filepath.Join("/proc", e.Name(), "ns", "net"))
		if err != nil || link != want {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		out[pid] = strings.TrimSpace(strings.ReplaceAll(string(cmd), "\x00", " "))
	}
	return out
}

// sidecarPID returns the PID of the built-in proxy in the namespace.
func sidecarPID(t *testing.T, path string) int {
	t.Helper()
	for pid, cmd := range procsIn(t, path) {
		if strings.Contains(cmd, "connect sidecar") || strings.Contains(cmd, "connect proxy") {
			return pid
		}
	}
	t.Fatalf("no built-in proxy process in %s (processes: %v)", path, procsIn(t, path))
	return 0
}

// waitRequests waits until tr has sent n more requests (answered or
// failed) than when called.
func waitRequests(t *testing.T, tr *traffic, n int, what string) {
	t.Helper()
	ok, failed := tr.Counts()
	from := ok + failed
	deadline := time.Now().Add(60 * time.Second)
	for ok+failed < from+n {
		select {
		case <-tr.done:
			t.Fatalf("the load ended after %d of %d requests %s", ok+failed-from, n, what)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after 60s waiting for %d requests %s (%d sent)", n, what, ok+failed-from)
		}
		time.Sleep(20 * time.Millisecond)
		ok, failed = tr.Counts()
	}
}

// sidecarAdmin is the built-in proxy's admin listener inside an
// allocation with one sidecar.
const sidecarAdmin = "127.0.0.2:19001"

// adsStats reads, from the admin listener of the sidecar in the namespace
// at path, whether its ADS stream is up (control_plane.connected_state)
// and how many times it ended (control_plane.reconnects).
func adsStats(path string) (connected bool, reconnects int64, err error) {
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
		DialContext: func(_ context.Context, _, addr string) (net.Conn, error) { return dialIn(path, addr, 2*time.Second) }}}
	resp, err := c.Get("http://" + sidecarAdmin + "/stats?filter=" + url.QueryEscape(`^control_plane\.(connected_state|reconnects)$`))
	if err != nil {
		return false, 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return false, 0, err
	}
	stats := map[string]int64{}
	for _, line := range strings.Split(string(b), "\n") {
		name, v, _ := strings.Cut(line, ": ")
		if n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
			stats[name] = n
		}
	}
	if _, ok := stats["control_plane.reconnects"]; !ok {
		return false, 0, fmt.Errorf("no control_plane stats in %q", b)
	}
	return stats["control_plane.connected_state"] == 1, stats["control_plane.reconnects"], nil
}

// adsReconnects returns the reconnect count of the sidecar in each
// namespace, for waitReconnected.
func adsReconnects(t *testing.T, paths ...string) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for _, p := range paths {
		_, n, err := adsStats(p)
		if err != nil {
			t.Fatalf("sidecar stats in %s: %v", p, err)
		}
		out[p] = n
	}
	return out
}

// waitReconnected waits until each sidecar's ADS stream ended since
// before (adsReconnects) and a new one is up: the sidecars are back on
// the agent's control plane.
func waitReconnected(t *testing.T, a *framework.Agent, before map[string]int64) {
	t.Helper()
	start := time.Now()
	a.Eventually(60*time.Second, "the sidecars' ADS streams to reconnect", func() bool {
		for p, n := range before {
			up, now, err := adsStats(p)
			if err != nil || !up || now <= n {
				return false
			}
		}
		return true
	})
	t.Logf("sidecars reconnected %s after the agent was ready", time.Since(start).Round(time.Millisecond))
}
