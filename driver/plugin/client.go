package plugin

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"google.golang.org/grpc"

	"github.com/meshlet/meshlet/driver"
)

// Client is a driver.Driver (and driver.StreamingExecer) served by a plugin
// process. Errors keep their sentinels: errors.Is(err,
// driver.ErrTaskNotFound) works across the process boundary.
type Client struct {
	cc   *grpc.ClientConn
	ctx  context.Context // cancelled by go-plugin when the plugin exits
	name string
}

var (
	_ driver.Driver          = (*Client)(nil)
	_ driver.StreamingExecer = (*Client)(nil)
)

func (c *Client) invoke(ctx context.Context, method string, req, resp any) error {
	err := c.cc.Invoke(ctx, "/"+serviceName+"/"+method, req, resp, grpc.ForceCodecV2(codec))
	return fromStatus(err)
}

// call is invoke without a caller context: it ends when the plugin does.
func (c *Client) call(method string, req, resp any) error {
	return c.invoke(c.ctx, method, req, resp)
}

// fetchName asks the plugin for its name; Load caches it.
func (c *Client) fetchName() (string, error) {
	var resp nameResponse
	if err := c.call("Name", &empty{}, &resp); err != nil {
		return "", err
	}
	return resp.Name, nil
}

// Name implements driver.Driver (the name fetched at load time).
func (c *Client) Name() string { return c.name }

// Fingerprint implements driver.Driver.
func (c *Client) Fingerprint(ctx context.Context) (*driver.Fingerprint, error) {
	var fp driver.Fingerprint
	if err := c.invoke(ctx, "Fingerprint", &empty{}, &fp); err != nil {
		return nil, err
	}
	return &fp, nil
}

// StartTask implements driver.Driver.
func (c *Client) StartTask(cfg *driver.TaskConfig) (*driver.TaskHandle, error) {
	var h driver.TaskHandle
	if err := c.call("StartTask", cfg, &h); err != nil {
		return nil, err
	}
	return &h, nil
}

// RecoverTask implements driver.Driver.
func (c *Client) RecoverTask(h *driver.TaskHandle) error {
	return c.call("RecoverTask", h, &empty{})
}

// StopTask implements driver.Driver.
func (c *Client) StopTask(taskID string, timeout time.Duration, signal string) error {
	return c.call("StopTask", &stopRequest{TaskID: taskID, Timeout: timeout, Signal: signal}, &empty{})
}

// DestroyTask implements driver.Driver.
func (c *Client) DestroyTask(taskID string, force bool) error {
	return c.call("DestroyTask", &destroyRequest{TaskID: taskID, Force: force}, &empty{})
}

// InspectTask implements driver.Driver.
func (c *Client) InspectTask(taskID string) (*driver.TaskStatus, error) {
	var st taskStatus
	if err := c.call("InspectTask", &taskIDRequest{TaskID: taskID}, &st); err != nil {
		return nil, err
	}
	return &driver.TaskStatus{ID: st.ID, Name: st.Name, State: st.State, StartedAt: st.StartedAt,
		CompletedAt: st.CompletedAt, ExitResult: st.ExitResult.toDriver(), PID: st.PID}, nil
}

// TaskStats implements driver.Driver.
func (c *Client) TaskStats(ctx context.Context, taskID string) (*driver.TaskResourceUsage, error) {
	var u driver.TaskResourceUsage
	if err := c.invoke(ctx, "TaskStats", &taskIDRequest{TaskID: taskID}, &u); err != nil {
		return nil, err
	}
	return &u, nil
}

// SignalTask implements driver.Driver.
func (c *Client) SignalTask(taskID string, signal string) error {
	return c.call("SignalTask", &signalRequest{TaskID: taskID, Signal: signal}, &empty{})
}

// ExecTask implements driver.Driver.
func (c *Client) ExecTask(taskID string, cmd []string, timeout time.Duration) (*driver.ExecResult, error) {
	var resp execResponse
	if err := c.call("ExecTask", &execRequest{TaskID: taskID, Command: cmd, Timeout: timeout}, &resp); err != nil {
		return nil, err
	}
	return resp.Result, resp.Err.toError()
}

// WaitTask implements driver.Driver over a server-streaming call: an
// unknown task fails here; the exit arrives on the channel, which is closed
// without a value if ctx ends (or the plugin dies) first.
func (c *Client) WaitTask(ctx context.Context, taskID string) (<-chan *driver.ExitResult, error) {
	ctx, cancel := context.WithCancel(ctx)
	stream, err := c.openStream(ctx, "WaitTask", false, &taskIDRequest{TaskID: taskID})
	if err != nil {
		cancel()
		return nil, err
	}
	md, err := stream.Header()
	if err == nil && md == nil { // trailers only: the server failed at once
		err = stream.RecvMsg(&exitResult{})
	}
	if err != nil {
		cancel()
		return nil, fromStatus(err)
	}
	ch := make(chan *driver.ExitResult, 1)
	go func() {
		defer cancel()
		defer close(ch)
		var res exitResult
		if err := stream.RecvMsg(&res); err == nil {
			ch <- res.toDriver()
		}
	}()
	return ch, nil
}

// openStream starts a streaming call and sends its first message; unless
// clientStreams, it also closes the sending side.
func (c *Client) openStream(ctx context.Context, method string, clientStreams bool, first any) (grpc.ClientStream, error) {
	desc := &grpc.StreamDesc{StreamName: method, ServerStreams: true, ClientStreams: clientStreams}
	stream, err := c.cc.NewStream(ctx, desc, "/"+serviceName+"/"+method, grpc.ForceCodecV2(codec))
	if err != nil {
		return nil, fromStatus(err)
	}
	if err := stream.SendMsg(first); err != nil && err != io.EOF {
		return nil, fromStatus(err)
	}
	if !clientStreams {
		if err := stream.CloseSend(); err != nil {
			return nil, fromStatus(err)
		}
	}
	return stream, nil
}

// ExecTaskStreaming implements driver.StreamingExecer over a bidirectional
// stream. Cancelling ctx cancels the call, which kills the command.
func (c *Client) ExecTaskStreaming(ctx context.Context, taskID string, opts *driver.ExecOptions) (int, error) {
	if opts == nil {
		return -1, fmt.Errorf("failed to exec in task %s: no options", taskID)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	start := &execStart{TaskID: taskID, Command: opts.Command, TTY: opts.TTY, HasStdin: opts.Stdin != nil, HasResize: opts.Resize != nil}
	stream, err := c.openStream(ctx, "ExecTaskStreaming", true, &execStreamIn{Start: start})
	if err != nil {
		return -1, err
	}
	if opts.Stdin == nil && opts.Resize == nil {
		if err := stream.CloseSend(); err != nil {
			return -1, fromStatus(err)
		}
	} else {
		startSenders(ctx, stream, opts)
	}
	for {
		var m execStreamOut
		if err := stream.RecvMsg(&m); err != nil {
			if ctx.Err() != nil {
				return -1, fmt.Errorf("failed to exec in task %s: %w", taskID, ctx.Err())
			}
			return -1, fromStatus(err)
		}
		if len(m.Stdout) > 0 && opts.Stdout != nil {
			_, _ = opts.Stdout.Write(m.Stdout)
		}
		if len(m.Stderr) > 0 && opts.Stderr != nil {
			_, _ = opts.Stderr.Write(m.Stderr)
		}
		if m.Exited {
			return m.ExitCode, m.Err.toError()
		}
	}
}

// execSender serializes an exec stream's sends (SendMsg is not safe for
// concurrent use) and closes the sending side once every sender is done.
type execSender struct {
	mu     sync.Mutex
	stream grpc.ClientStream
	active sync.WaitGroup
}

func (s *execSender) send(m *execStreamIn) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stream.SendMsg(m)
}

// startSenders streams opts.Stdin and opts.Resize to the plugin, until
// they end or ctx does, then closes the sending side.
func startSenders(ctx context.Context, stream grpc.ClientStream, opts *driver.ExecOptions) {
	s := &execSender{stream: stream}
	if opts.Stdin != nil {
		s.active.Add(1)
		go func() {
			defer s.active.Done()
			sendStdin(s, opts.Stdin)
		}()
	}
	if opts.Resize != nil {
		s.active.Add(1)
		go func() {
			defer s.active.Done()
			sendResizes(ctx, s, opts.Resize)
		}()
	}
	go func() {
		s.active.Wait()
		s.mu.Lock()
		defer s.mu.Unlock()
		_ = stream.CloseSend()
	}()
}

// sendResizes streams terminal sizes until ch closes or ctx ends.
func sendResizes(ctx context.Context, s *execSender, ch <-chan driver.TerminalSize) {
	for {
		select {
		case sz, ok := <-ch:
			if !ok || s.send(&execStreamIn{Resize: &sz}) != nil {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// sendStdin streams r to the plugin, then StdinClose.
func sendStdin(s *execSender, r io.Reader) {
	buf := make([]byte, 32*1024)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if s.send(&execStreamIn{Stdin: append([]byte(nil), buf[:n]...)}) != nil {
				return
			}
		}
		if err != nil {
			_ = s.send(&execStreamIn{StdinClose: true})
			return
		}
	}
}
