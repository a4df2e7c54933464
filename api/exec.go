package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/gorilla/websocket"
	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/structs"
)

// Exec protocol frames, as nomad/api's Allocations().Exec speaks them.
type execIOOperation struct {
	Data  []byte `json:"data,omitempty"`
	Close bool   `json:"close,omitempty"`
}

type execTerminalSize struct {
	Height int `json:"height,omitempty"`
	Width  int `json:"width,omitempty"`
}

type execInput struct {
	Stdin   *execIOOperation  `json:"stdin,omitempty"`
	TTYSize *execTerminalSize `json:"tty_size,omitempty"`
}

type execExitResult struct {
	ExitCode int `json:"exit_code"`
}

type execOutput struct {
	Stdout *execIOOperation `json:"stdout,omitempty"`
	Stderr *execIOOperation `json:"stderr,omitempty"`
	Exited bool             `json:"exited,omitempty"`
	Result *execExitResult  `json:"result,omitempty"`
}

const (
	execReadLimit    = 1 << 20
	execWriteTimeout = 10 * time.Second
	// maxCloseReason is what fits in a websocket close frame (125 bytes
	// minus the 2-byte code).
	maxCloseReason = 123
)

var execUpgrader = websocket.Upgrader{
	ReadBufferSize:  4096,
	WriteBufferSize: 4096,
	// The default CheckOrigin rejects cross-origin browser requests.
}

// handleExec serves GET /v1/client/allocation/:alloc/exec. Problems found
// before the upgrade are plain HTTP errors; after it, a failure to run the
// command closes the socket with the error text, which the official client
// returns as its error.
func (s *Server) handleExec(w http.ResponseWriter, r *http.Request) {
	req, alloc, err := s.parseExecRequest(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	conn, err := execUpgrader.Upgrade(w, r, nil)
	if err != nil {
		return // the upgrader already answered with an HTTP error
	}
	defer conn.Close()
	conn.SetReadLimit(execReadLimit)
	ctx, cancel := s.requestContext(r)
	defer cancel()
	// A session lasts as long as its token allows it, not longer.
	ctx, stop := s.whileAuthorized(ctx, r, func(a authorizer) error { return execAllowed(a, alloc, req.Task) })
	defer stop()
	s.runExecSession(ctx, conn, req)
}

// parseExecRequest reads and authorizes an exec request; it also returns
// the allocation, whose task's driver the authorization depends on.
func (s *Server) parseExecRequest(r *http.Request) (ExecRequest, *structs.Allocation, error) {
	q := r.URL.Query()
	req := ExecRequest{Task: q.Get("task")}
	if req.Task == "" {
		return req, nil, fmt.Errorf("%w: missing task name", errBadRequest)
	}
	raw := q.Get("command")
	if raw == "" {
		return req, nil, fmt.Errorf("%w: missing command", errBadRequest)
	}
	if err := json.Unmarshal([]byte(raw), &req.Cmd); err != nil {
		return req, nil, fmt.Errorf("%w: command must be a JSON array of strings: %s", errBadRequest, err.Error())
	}
	if len(req.Cmd) == 0 || req.Cmd[0] == "" {
		return req, nil, fmt.Errorf("%w: command is empty", errBadRequest)
	}
	tty, err := queryBool(r, "tty", false)
	if err != nil {
		return req, nil, err
	}
	req.TTY = tty
	alloc, err := s.b.GetAllocation(r.Context(), r.PathValue("alloc"))
	if err != nil {
		return req, nil, fmt.Errorf("failed to get allocation: %w", err)
	}
	if err := checkTask(alloc, req.Task); err != nil {
		return req, nil, err
	}
	if err := s.authorizeExec(r, alloc, req.Task); err != nil {
		return req, nil, err
	}
	req.AllocID = alloc.ID
	return req, alloc, nil
}

// wsFrameWriter serializes every write to one websocket connection.
type wsFrameWriter struct {
	mu   sync.Mutex
	conn *websocket.Conn
}

func (f *wsFrameWriter) send(v any) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	_ = f.conn.SetWriteDeadline(time.Now().Add(execWriteTimeout))
	return f.conn.WriteJSON(v)
}

func (f *wsFrameWriter) close(code int, reason string) {
	reason = fitCloseReason(reason)
	f.mu.Lock()
	defer f.mu.Unlock()
	msg := websocket.FormatCloseMessage(code, reason)
	_ = f.conn.WriteControl(websocket.CloseMessage, msg, time.Now().Add(execWriteTimeout))
}

// fitCloseReason shortens reason to what a close frame carries, keeping
// the end: wrapped errors put the root cause last.
func fitCloseReason(reason string) string {
	if len(reason) <= maxCloseReason {
		return reason
	}
	cut := len(reason) - (maxCloseReason - len("..."))
	for cut < len(reason) && !utf8.RuneStart(reason[cut]) {
		cut++
	}
	return "..." + reason[cut:]
}

// streamWriter turns writes into stdout or stderr frames.
type streamWriter struct {
	f      *wsFrameWriter
	stderr bool
}

func (sw streamWriter) Write(p []byte) (int, error) {
	for off := 0; off < len(p); off += logChunk {
		chunk := p[off:min(off+logChunk, len(p))]
		op := &execIOOperation{Data: chunk}
		out := execOutput{Stdout: op}
		if sw.stderr {
			out = execOutput{Stderr: op}
		}
		if err := sw.f.send(&out); err != nil {
			return off, err
		}
	}
	return len(p), nil
}

func (s *Server) runExecSession(parent context.Context, conn *websocket.Conn, req ExecRequest) {
	ctx, cancel := context.WithCancel(parent)
	defer cancel()
	fw := &wsFrameWriter{conn: conn}
	stdinR, stdinW := io.Pipe()
	readDone := make(chan struct{})
	resize := make(chan TerminalSize, 1)
	go func() {
		defer close(readDone)
		execReadLoop(conn, stdinW, resize)
		cancel() // the client went away (or closed the socket)
	}()

	// An ended session (revoked, or the server closing) stops feeding
	// stdin, so that a backend blocked reading it returns.
	stopStdin := context.AfterFunc(ctx, func() { _ = stdinR.Close() })
	defer stopStdin()
	req.Stdin, req.Resize = stdinR, resize
	req.Stdout = streamWriter{f: fw}
	req.Stderr = streamWriter{f: fw, stderr: true}
	code, err := s.b.ExecTask(ctx, req)
	_ = stdinR.Close() // unblocks a read loop stuck writing unread stdin
	switch {
	case err != nil && ctx.Err() == nil:
		s.logger.Debug("exec failed", "alloc_id", req.AllocID, "task", req.Task, "error", err)
		fw.close(websocket.CloseInternalServerErr, oneLine(err.Error()))
	case err == nil:
		if serr := fw.send(&execOutput{Exited: true, Result: &execExitResult{ExitCode: code}}); serr == nil {
			fw.close(websocket.CloseNormalClosure, "")
		}
	case errors.Is(context.Cause(ctx), errNoLongerAuthorized):
		fw.close(websocket.ClosePolicyViolation, "exec session ended: "+errNoLongerAuthorized.Error())
	default: // the client left, or the server is closing
		fw.close(websocket.CloseGoingAway, "exec session ended: the agent is shutting down or the client left")
	}
	_ = conn.Close()
	<-readDone
}

// execReadLoop feeds stdin frames into w and terminal sizes into resize
// (never blocking on it: an unread size gives way to a newer one) until
// the socket fails or closes; empty frames are heartbeats.
func execReadLoop(conn *websocket.Conn, w *io.PipeWriter, resize chan TerminalSize) {
	defer w.Close()
	defer close(resize)
	for {
		var in execInput
		if err := conn.ReadJSON(&in); err != nil {
			_ = w.CloseWithError(io.ErrUnexpectedEOF)
			return
		}
		if sz := in.TTYSize; sz != nil {
			driver.OfferSize(resize, TerminalSize{Height: sz.Height, Width: sz.Width})
		}
		if in.Stdin == nil {
			continue
		}
		if len(in.Stdin.Data) > 0 {
			if _, err := w.Write(in.Stdin.Data); err != nil {
				// Nobody reads stdin any more; keep draining frames so
				// that the client's close is noticed.
				continue
			}
		}
		if in.Stdin.Close {
			_ = w.Close()
		}
	}
}
