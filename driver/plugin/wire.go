package plugin

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	grpcproto "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/protoadapt"

	"github.com/meshlet/meshlet/driver"
)

// codecName is the gRPC content-subtype of every call on the service
// ("application/grpc+json").
const codecName = "json"

// codec is forced on the plugin's own connections only: the client passes
// it with every call (grpc.ForceCodecV2) and the plugin's server is built
// with it (grpc.ForceServerCodecV2). It is never registered with
// encoding.RegisterCodec, which would make every gRPC server in the
// importing process (the agent's xDS and ext_authz server among them)
// accept application/grpc+json too.
var codec encoding.CodecV2 = pluginCodec{}

// pluginCodec encodes the driver service's messages with encoding/json:
// there is no protoc on the build hosts, so they are plain Go structs.
// Protobuf messages (go-plugin's own health, broker, controller and stdio
// services share the plugin's server) keep the protobuf encoding.
type pluginCodec struct{}

func (pluginCodec) Marshal(v any) (mem.BufferSlice, error) {
	if isProto(v) {
		return protoCodec().Marshal(v)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("failed to encode %T: %w", v, err)
	}
	return mem.BufferSlice{mem.SliceBuffer(b)}, nil
}

func (pluginCodec) Unmarshal(data mem.BufferSlice, v any) error {
	if isProto(v) {
		return protoCodec().Unmarshal(data, v)
	}
	if err := json.Unmarshal(data.Materialize(), v); err != nil {
		return fmt.Errorf("failed to decode %T: %w", v, err)
	}
	return nil
}

func (pluginCodec) Name() string { return codecName }

// isProto reports whether v is a generated protobuf message (API v2 or v1).
func isProto(v any) bool {
	switch v.(type) {
	case proto.Message, protoadapt.MessageV1:
		return true
	}
	return false
}

// protoCodec is gRPC's own protobuf codec (registered by grpc itself).
func protoCodec() encoding.CodecV2 { return encoding.GetCodecV2(grpcproto.Name) }

// Request and response messages. driver types without an error field go on
// the wire as they are.
type (
	empty        struct{}
	nameResponse struct {
		Name string `json:"name"`
	}
	taskIDRequest struct {
		TaskID string `json:"task_id"`
	}
	stopRequest struct {
		TaskID  string        `json:"task_id"`
		Timeout time.Duration `json:"timeout_ns"`
		Signal  string        `json:"signal"`
	}
	destroyRequest struct {
		TaskID string `json:"task_id"`
		Force  bool   `json:"force"`
	}
	signalRequest struct {
		TaskID string `json:"task_id"`
		Signal string `json:"signal"`
	}
	execRequest struct {
		TaskID  string        `json:"task_id"`
		Command []string      `json:"command"`
		Timeout time.Duration `json:"timeout_ns"`
	}
	// execResponse carries both: a timed-out exec has output and an error.
	execResponse struct {
		Result *driver.ExecResult `json:"result,omitempty"`
		Err    *wireError         `json:"error,omitempty"`
	}
	exitResult struct {
		ExitCode  int        `json:"exit_code"`
		Signal    int        `json:"signal"`
		OOMKilled bool       `json:"oom_killed"`
		Err       *wireError `json:"error,omitempty"`
	}
	taskStatus struct {
		ID          string      `json:"id"`
		Name        string      `json:"name"`
		State       string      `json:"state"`
		StartedAt   time.Time   `json:"started_at"`
		CompletedAt time.Time   `json:"completed_at"`
		ExitResult  *exitResult `json:"exit_result,omitempty"`
		PID         int         `json:"pid"`
	}
	// execStreamIn is a client→server message of ExecTaskStreaming: the
	// first carries Start; then Stdin chunks, then StdinClose, and
	// terminal sizes (Resize) in between or after.
	execStreamIn struct {
		Start      *execStart           `json:"start,omitempty"`
		Stdin      []byte               `json:"stdin,omitempty"`
		StdinClose bool                 `json:"stdin_close,omitempty"`
		Resize     *driver.TerminalSize `json:"resize,omitempty"`
	}
	execStart struct {
		TaskID    string   `json:"task_id"`
		Command   []string `json:"command"`
		TTY       bool     `json:"tty"`
		HasStdin  bool     `json:"has_stdin"`
		HasResize bool     `json:"has_resize,omitempty"`
	}
	// execStreamOut is a server→client message: output chunks, and last
	// one with Exited set.
	execStreamOut struct {
		Stdout   []byte     `json:"stdout,omitempty"`
		Stderr   []byte     `json:"stderr,omitempty"`
		Exited   bool       `json:"exited,omitempty"`
		ExitCode int        `json:"exit_code,omitempty"`
		Err      *wireError `json:"error,omitempty"`
	}
)

func toWireExit(r *driver.ExitResult) *exitResult {
	if r == nil {
		return nil
	}
	return &exitResult{ExitCode: r.ExitCode, Signal: r.Signal, OOMKilled: r.OOMKilled, Err: toWireError(r.Err)}
}

func (r *exitResult) toDriver() *driver.ExitResult {
	if r == nil {
		return nil
	}
	return &driver.ExitResult{ExitCode: r.ExitCode, Signal: r.Signal, OOMKilled: r.OOMKilled, Err: r.Err.toError()}
}

// wireError is an error with the sentinel it wraps, if any, named by kind.
type wireError struct {
	Kind    string `json:"kind,omitempty"`
	Message string `json:"message"`
}

// kinds maps sentinel errors to wire kinds and gRPC codes, both ways.
var kinds = []struct {
	kind string
	err  error
	code codes.Code
}{
	{"task_not_found", driver.ErrTaskNotFound, codes.NotFound},
	{"task_exists", driver.ErrTaskExists, codes.AlreadyExists},
	{"handle_version", driver.ErrHandleVersion, codes.FailedPrecondition},
	{"not_supported", driver.ErrNotSupported, codes.Unimplemented},
	{"canceled", context.Canceled, codes.Canceled},
	{"deadline_exceeded", context.DeadlineExceeded, codes.DeadlineExceeded},
	// Last: an error with a more specific sentinel keeps that one.
	{"unrecoverable", driver.ErrUnrecoverable, codes.InvalidArgument},
}

func toWireError(err error) *wireError {
	if err == nil {
		return nil
	}
	w := &wireError{Message: err.Error()}
	for _, k := range kinds {
		if errors.Is(err, k.err) {
			w.Kind = k.kind
			break
		}
	}
	return w
}

func (w *wireError) toError() error {
	if w == nil {
		return nil
	}
	e := &remoteError{msg: w.Message}
	for _, k := range kinds {
		if k.kind == w.Kind {
			e.sentinel = k.err
		}
	}
	return e
}

// remoteError is an error from the plugin: its text, unwrapping to the
// sentinel it wrapped on the plugin's side.
type remoteError struct {
	msg      string
	sentinel error
}

func (e *remoteError) Error() string { return e.msg }
func (e *remoteError) Unwrap() error { return e.sentinel }

// toStatus turns a driver error into a gRPC status error.
func toStatus(err error) error {
	if err == nil {
		return nil
	}
	code := codes.Unknown
	for _, k := range kinds {
		if errors.Is(err, k.err) {
			code = k.code
			break
		}
	}
	return status.Error(code, err.Error())
}

// fromStatus turns a gRPC error back into a driver error.
func fromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	e := &remoteError{msg: st.Message()}
	for _, k := range kinds {
		if k.code == st.Code() {
			e.sentinel = k.err
		}
	}
	if st.Code() == codes.Unavailable {
		e.msg = "driver plugin unavailable: " + st.Message()
	}
	return e
}
