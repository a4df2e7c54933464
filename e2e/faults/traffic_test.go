package faults

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/containernetworking/plugins/pkg/ns"
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
