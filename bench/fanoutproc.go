package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os/exec"
	"strings"
	"sync"
	"time"
)

// loadProc is one running xdsload process, driven line by line.
type loadProc struct {
	role   string // "server" or "client"
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string // stdout, closed at EOF
	stderr *tailWriter

	waitOnce sync.Once
	waitErr  error
}

// wait waits for the process once; its stderr is complete afterwards (exec
// copies it on a goroutine that Wait joins).
func (p *loadProc) wait() error {
	p.waitOnce.Do(func() { p.waitErr = p.cmd.Wait() })
	return p.waitErr
}

// startLoadProc starts `bin -role role args...`; ctx ending kills it.
func startLoadProc(ctx context.Context, bin, role string, args ...string) (*loadProc, error) {
	cmd := exec.CommandContext(ctx, bin, append([]string{"-role", role}, args...)...)
	cmd.WaitDelay = 5 * time.Second
	p := &loadProc{role: role, cmd: cmd, lines: make(chan string, 16), stderr: &tailWriter{max: 2048}}
	cmd.Stderr = p.stderr
	var err error
	if p.stdin, err = cmd.StdinPipe(); err != nil {
		return nil, fmt.Errorf("failed to start xdsload: %w", err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("failed to start xdsload: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("failed to start xdsload: %w", err)
	}
	go func() {
		defer close(p.lines)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	return p, nil
}

// pid is the process's ID.
func (p *loadProc) pid() int { return p.cmd.Process.Pid }

// expect waits (at most fanoutHangGuard) for the next line that starts
// with word and returns it.
func (p *loadProc) expect(word string) (string, error) {
	guard := time.NewTimer(fanoutHangGuard)
	defer guard.Stop()
	for {
		select {
		case l, ok := <-p.lines:
			if !ok {
				waited := make(chan struct{})
				go func() { _ = p.wait(); close(waited) }()
				select { // stdout's EOF can come before the last of stderr
				case <-waited:
				case <-time.After(5 * time.Second):
				}
				return "", fmt.Errorf("xdsload %s exited before %q: %s", p.role, word, p.stderr.String())
			}
			if f := strings.Fields(l); len(f) > 0 && f[0] == word {
				return l, nil
			}
		case <-guard.C:
			return "", fmt.Errorf("xdsload %s: no %q line after %s: %s", p.role, word, fanoutHangGuard, p.stderr.String())
		}
	}
}

// send writes one command line.
func (p *loadProc) send(line string) error {
	if _, err := io.WriteString(p.stdin, line+"\n"); err != nil {
		return fmt.Errorf("failed to send %q to xdsload: %w", line, err)
	}
	return nil
}

// stop closes stdin (the signal to exit) and waits; a process still
// running after fanoutHangGuard is killed.
func (p *loadProc) stop() error {
	_ = p.stdin.Close()
	done := make(chan error, 1)
	go func() {
		for range p.lines { // drain, so Wait can finish
		}
		done <- p.wait()
	}()
	select {
	case err := <-done:
		if err != nil {
			return fmt.Errorf("xdsload %s failed: %w: %s", p.role, err, p.stderr.String())
		}
		return nil
	case <-time.After(fanoutHangGuard):
		_ = p.cmd.Process.Kill()
		<-done
		return fmt.Errorf("xdsload %s did not exit within %s; killed", p.role, fanoutHangGuard)
	}
}

// tailWriter keeps the last max bytes written (a process's stderr), as one line.
type tailWriter struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (w *tailWriter) Write(b []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, b...)
	if over := len(w.buf) - w.max; over > 0 {
		w.buf = w.buf[over:]
	}
	return len(b), nil
}

func (w *tailWriter) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := strings.Join(strings.Fields(string(w.buf)), " ")
	if s == "" {
		return "(no stderr)"
	}
	return s
}
