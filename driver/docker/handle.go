package docker

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/internal/atomicfile"
)

// handleVersion is the version of driverState (and of driver.TaskHandle).
const handleVersion = 1

// driverState is the recovery payload in driver.TaskHandle.DriverState.
type driverState struct {
	Version     int       `json:"version"`
	ContainerID string    `json:"container_id"`
	Image       string    `json:"image"`
	StartedAt   time.Time `json:"started_at"`
	// CursorFile keeps the timestamps of the last log lines copied, so a
	// recovered task resumes its logs there.
	CursorFile string `json:"cursor_file"`
	// TTY: the container has a terminal (tty = true), so its output is
	// one raw stream, not Docker's multiplexed frames.
	TTY bool `json:"tty,omitempty"`
}

func decodeState(b []byte) (*driverState, error) {
	var st driverState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("failed to decode driver state: %w", err)
	}
	if st.Version != handleVersion {
		return nil, fmt.Errorf("driver state version %d: %w", st.Version, driver.ErrHandleVersion)
	}
	if st.ContainerID == "" {
		return nil, errors.New("failed to decode driver state: missing container ID")
	}
	return &st, nil
}

// taskHandle is one task's container. cfg and st never change; mu guards
// the rest.
type taskHandle struct {
	cfg    *driver.TaskConfig
	st     *driverState
	exited chan struct{} // closed once exit is set
	once   sync.Once
	// cancel stops the monitor and the log copier (DestroyTask).
	cancel context.CancelFunc
	// logsDone is closed when the log copier has finished.
	logsDone chan struct{}

	mu          sync.RWMutex
	pid         int
	completedAt time.Time
	exit        *driver.ExitResult
}

func newHandle(cfg *driver.TaskConfig, st *driverState, cancel context.CancelFunc) *taskHandle {
	return &taskHandle{cfg: cfg, st: st, exited: make(chan struct{}), logsDone: make(chan struct{}), cancel: cancel}
}

// setExited records the exit once and wakes the waiters.
func (h *taskHandle) setExited(res *driver.ExitResult, at time.Time) {
	h.once.Do(func() {
		h.mu.Lock()
		h.exit, h.completedAt = res, at
		h.mu.Unlock()
		close(h.exited)
	})
}

func (h *taskHandle) running() bool {
	select {
	case <-h.exited:
		return false
	default:
		return true
	}
}

func (h *taskHandle) result() *driver.ExitResult {
	h.mu.RLock()
	defer h.mu.RUnlock()
	if h.exit == nil {
		return nil
	}
	r := *h.exit
	return &r
}

func (h *taskHandle) status() *driver.TaskStatus {
	h.mu.RLock()
	defer h.mu.RUnlock()
	s := &driver.TaskStatus{ID: h.cfg.ID, Name: h.cfg.Name, State: driver.TaskStateRunning,
		StartedAt: h.st.StartedAt, PID: h.pid}
	if h.exit != nil {
		r := *h.exit
		s.State, s.CompletedAt, s.ExitResult, s.PID = driver.TaskStateExited, h.completedAt, &r, 0
	}
	return s
}

// cursorFile names the file keeping a task's log cursor.
func cursorFile(stateDir, taskID string) string {
	return filepath.Join(stateDir, strings.NewReplacer("/", "_", "\\", "_").Replace(taskID)+".logcursor")
}

// cursor is, for each stream (indexed by streamStdout and streamStderr),
// the timestamp of the last message copied and how many messages with
// that timestamp were copied: Docker splits a line longer than 16 KiB into
// partial messages that all carry the first one's timestamp, so the
// timestamp alone cannot tell which of them a re-attach already copied.
// Docker stamps each stream's messages in order but interleaves the two
// streams out of order, so each stream needs its own.
type cursor [3]cursorPos

// cursorPos is one stream's position.
type cursorPos struct {
	t time.Time
	n int // messages copied with timestamp t
}

// since is where to resume reading: the earlier of the two, or the
// beginning while a stream has none. Docker's since is inclusive.
func (c cursor) since() time.Time {
	out, errs := c[streamStdout].t, c[streamStderr].t
	switch {
	case out.IsZero() || errs.IsZero():
		return time.Time{}
	case out.Before(errs):
		return out
	default:
		return errs
	}
}

func (c cursor) equal(o cursor) bool {
	for _, s := range []int{streamStdout, streamStderr} {
		if !c[s].t.Equal(o[s].t) || c[s].n != o[s].n {
			return false
		}
	}
	return true
}

// readCursor returns the saved log cursor (zero if none): one
// "<stream> <RFC 3339 timestamp> <count>" line per stream. A line without
// a count (written before counts existed) means every message of that
// timestamp was copied.
func readCursor(path string) cursor {
	var c cursor
	b, err := os.ReadFile(path)
	if err != nil {
		return c
	}
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		t, err := time.Parse(time.RFC3339Nano, f[1])
		if err != nil {
			continue
		}
		n := math.MaxInt
		if len(f) > 2 {
			if v, err := strconv.Atoi(f[2]); err == nil && v > 0 {
				n = v
			}
		}
		switch f[0] {
		case "stdout":
			c[streamStdout] = cursorPos{t, n}
		case "stderr":
			c[streamStderr] = cursorPos{t, n}
		}
	}
	return c
}

// writeCursor saves the log cursor atomically.
func writeCursor(path string, c cursor) error {
	var b strings.Builder
	for _, s := range []struct {
		name string
		p    cursorPos
	}{{"stdout", c[streamStdout]}, {"stderr", c[streamStderr]}} {
		if !s.p.t.IsZero() {
			fmt.Fprintf(&b, "%s %s %d\n", s.name, s.p.t.UTC().Format(time.RFC3339Nano), s.p.n)
		}
	}
	if err := atomicfile.WriteFile(path, []byte(b.String()), 0o600); err != nil {
		return fmt.Errorf("failed to write log cursor: %w", err)
	}
	return nil
}

// removeFile removes path; a missing file is fine.
func removeFile(path string) error {
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	return nil
}
