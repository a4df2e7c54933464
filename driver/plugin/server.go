package plugin

import (
	"context"
	"io"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/meshlet/meshlet/driver"
)

// serviceName is the gRPC service; methods are "/<serviceName>/<Method>".
const serviceName = "meshlet.driver.v1.Driver"

// driverService is the handler type the service descriptor names.
type driverService interface{ driverImpl() driver.Driver }

// server adapts a driver.Driver to the service.
type server struct{ impl driver.Driver }

func (s *server) driverImpl() driver.Driver { return s.impl }

// unary builds a method whose request decodes into Req and whose driver
// errors become gRPC statuses.
func unary[Req any](name string, call func(ctx context.Context, d driver.Driver, req *Req) (any, error)) grpc.MethodDesc {
	return grpc.MethodDesc{
		MethodName: name,
		Handler: func(srv any, ctx context.Context, dec func(any) error, ic grpc.UnaryServerInterceptor) (any, error) {
			req := new(Req)
			if err := dec(req); err != nil {
				return nil, err
			}
			d := srv.(driverService).driverImpl()
			handler := func(ctx context.Context, r any) (any, error) {
				resp, err := call(ctx, d, r.(*Req))
				if err != nil {
					return nil, toStatus(err)
				}
				return resp, nil
			}
			if ic == nil {
				return handler(ctx, req)
			}
			return ic(ctx, req, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/" + serviceName + "/" + name}, handler)
		},
	}
}

// serviceDesc is the hand-written descriptor of meshlet.driver.v1.Driver.
var serviceDesc = grpc.ServiceDesc{
	ServiceName: serviceName,
	HandlerType: (*driverService)(nil),
	Methods: []grpc.MethodDesc{
		unary("Name", func(_ context.Context, d driver.Driver, _ *empty) (any, error) {
			return &nameResponse{Name: d.Name()}, nil
		}),
		unary("Fingerprint", func(ctx context.Context, d driver.Driver, _ *empty) (any, error) {
			return d.Fingerprint(ctx)
		}),
		unary("StartTask", func(_ context.Context, d driver.Driver, cfg *driver.TaskConfig) (any, error) {
			return d.StartTask(cfg)
		}),
		unary("RecoverTask", func(_ context.Context, d driver.Driver, h *driver.TaskHandle) (any, error) {
			return &empty{}, d.RecoverTask(h)
		}),
		unary("StopTask", func(_ context.Context, d driver.Driver, r *stopRequest) (any, error) {
			return &empty{}, d.StopTask(r.TaskID, r.Timeout, r.Signal)
		}),
		unary("DestroyTask", func(_ context.Context, d driver.Driver, r *destroyRequest) (any, error) {
			return &empty{}, d.DestroyTask(r.TaskID, r.Force)
		}),
		unary("InspectTask", func(_ context.Context, d driver.Driver, r *taskIDRequest) (any, error) {
			st, err := d.InspectTask(r.TaskID)
			if err != nil {
				return nil, err
			}
			return &taskStatus{ID: st.ID, Name: st.Name, State: st.State, StartedAt: st.StartedAt,
				CompletedAt: st.CompletedAt, ExitResult: toWireExit(st.ExitResult), PID: st.PID}, nil
		}),
		unary("TaskStats", func(ctx context.Context, d driver.Driver, r *taskIDRequest) (any, error) {
			return d.TaskStats(ctx, r.TaskID)
		}),
		unary("SignalTask", func(_ context.Context, d driver.Driver, r *signalRequest) (any, error) {
			return &empty{}, d.SignalTask(r.TaskID, r.Signal)
		}),
		unary("ExecTask", func(_ context.Context, d driver.Driver, r *execRequest) (any, error) {
			res, err := d.ExecTask(r.TaskID, r.Command, r.Timeout)
			if res == nil {
				return nil, err
			}
			return &execResponse{Result: res, Err: toWireError(err)}, nil
		}),
	},
	Streams: []grpc.StreamDesc{
		{StreamName: "WaitTask", Handler: waitTaskHandler, ServerStreams: true},
		{StreamName: "ExecTaskStreaming", Handler: execStreamHandler, ServerStreams: true, ClientStreams: true},
	},
}

// waitTaskHandler: request taskIDRequest; the response header is sent once
// the task is known (so the client can fail WaitTask synchronously), then
// exactly one exitResult when the task exits.
func waitTaskHandler(srv any, stream grpc.ServerStream) error {
	var req taskIDRequest
	if err := stream.RecvMsg(&req); err != nil {
		return err
	}
	ch, err := srv.(driverService).driverImpl().WaitTask(stream.Context(), req.TaskID)
	if err != nil {
		return toStatus(err)
	}
	if err := stream.SendHeader(metadata.Pairs("meshlet-wait", "started")); err != nil {
		return err
	}
	res, ok := <-ch
	if !ok || res == nil {
		return status.Error(codes.Canceled, "wait cancelled")
	}
	return stream.SendMsg(toWireExit(res))
}

// execStreamHandler serves ExecTaskStreaming: see execStreamIn/Out.
func execStreamHandler(srv any, stream grpc.ServerStream) error {
	var first execStreamIn
	if err := stream.RecvMsg(&first); err != nil {
		return err
	}
	if first.Start == nil {
		return status.Error(codes.InvalidArgument, "first exec message must carry start")
	}
	se, ok := srv.(driverService).driverImpl().(driver.StreamingExecer)
	if !ok {
		return toStatus(driver.ErrNotSupported)
	}
	var mu sync.Mutex // SendMsg is not safe for concurrent use
	send := func(m *execStreamOut) error {
		mu.Lock()
		defer mu.Unlock()
		return stream.SendMsg(m)
	}
	opts := &driver.ExecOptions{
		Command: first.Start.Command,
		TTY:     first.Start.TTY,
		Stdout:  writerFunc(func(p []byte) error { return send(&execStreamOut{Stdout: p}) }),
		Stderr:  writerFunc(func(p []byte) error { return send(&execStreamOut{Stderr: p}) }),
	}
	var pw *io.PipeWriter
	if first.Start.HasStdin {
		var pr *io.PipeReader
		pr, pw = io.Pipe()
		defer pr.Close()
		opts.Stdin = pr
	}
	var resize chan driver.TerminalSize
	if first.Start.HasResize {
		resize = make(chan driver.TerminalSize, 1)
		opts.Resize = resize
	}
	if pw != nil || resize != nil {
		go pumpInput(stream, pw, resize)
	}
	code, err := se.ExecTaskStreaming(stream.Context(), first.Start.TaskID, opts)
	return send(&execStreamOut{Exited: true, ExitCode: code, Err: toWireError(err)})
}

// pumpInput feeds the client's stdin messages into w (if set) until
// StdinClose, and its terminal sizes into resize (if set; an unread size
// gives way to a newer one), until the end of the client's stream or an
// error.
func pumpInput(stream grpc.ServerStream, w *io.PipeWriter, resize chan driver.TerminalSize) {
	if w != nil {
		defer w.Close()
	}
	if resize != nil {
		defer close(resize)
	}
	for {
		var m execStreamIn
		if err := stream.RecvMsg(&m); err != nil {
			return
		}
		if len(m.Stdin) > 0 && w != nil {
			// A failed write means nobody reads stdin any more.
			_, _ = w.Write(m.Stdin)
		}
		if m.StdinClose && w != nil {
			w.Close()
		}
		if m.Resize != nil && resize != nil {
			driver.OfferSize(resize, *m.Resize)
		}
	}
}

// writerFunc is an io.Writer sending each write as one message.
type writerFunc func(p []byte) error

func (f writerFunc) Write(p []byte) (int, error) {
	if err := f(append([]byte(nil), p...)); err != nil {
		return 0, err
	}
	return len(p), nil
}
