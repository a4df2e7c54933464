package api

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"

	"github.com/meshlet/meshlet/structs"
)

// logChunk is the largest piece of log data sent in one frame or write.
const logChunk = 32 << 10

// handleLogs serves GET /v1/client/fs/logs/:alloc. With plain=true the body
// is the raw log bytes; otherwise it is a stream of StreamFrame JSON objects,
// which is what nomad/api's AllocFS().Logs decodes. Offset in a frame is the
// number of bytes sent so far plus the requested offset (origin=start).
func (s *Server) handleLogs(w http.ResponseWriter, r *http.Request) {
	req, plain, err := parseLogRequest(r)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	alloc, err := s.b.GetAllocation(r.Context(), req.AllocID)
	if err != nil {
		s.writeError(w, r, fmt.Errorf("failed to get allocation: %w", err))
		return
	}
	if err := checkTask(alloc, req.Task); err != nil {
		s.writeError(w, r, err)
		return
	}
	req.AllocID = alloc.ID

	ctx, cancel := s.requestContext(r)
	defer cancel()
	// A followed log lasts as long as its token allows it, not longer.
	ctx, stop := s.whileAuthorized(ctx, r, nil)
	defer stop()
	rc, err := s.b.TaskLogs(ctx, req)
	if err != nil {
		s.writeError(w, r, fmt.Errorf("failed to open task logs: %w", err))
		return
	}
	var once sync.Once
	closeRC := func() { once.Do(func() { _ = rc.Close() }) }
	defer closeRC()
	// A follow reader may block in Read; closing it when the client leaves
	// unblocks it.
	go func() {
		<-ctx.Done()
		closeRC()
	}()

	w.Header().Set("X-Nomad-Index", strconv.FormatUint(s.b.Index(), 10))
	if plain {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	} else {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(http.StatusOK)
	// Send the headers now: a follower may wait long for the first byte.
	_ = http.NewResponseController(w).Flush()
	file := fmt.Sprintf("alloc/logs/%s.%s", req.Task, req.Type)
	if err := streamLogs(w, rc, plain, file, req); err != nil && ctx.Err() == nil {
		s.logger.Debug("log stream ended", "alloc_id", alloc.ID, "task", req.Task, "error", err)
	}
}

func parseLogRequest(r *http.Request) (LogRequest, bool, error) {
	q := r.URL.Query()
	req := LogRequest{
		AllocID: r.PathValue("alloc"),
		Task:    q.Get("task"),
		Type:    q.Get("type"),
		Origin:  q.Get("origin"),
	}
	if req.Task == "" {
		return req, false, fmt.Errorf("%w: missing task name", errBadRequest)
	}
	switch req.Type {
	case "stdout", "stderr":
	default:
		return req, false, fmt.Errorf("%w: log type must be \"stdout\" or \"stderr\", got %q", errBadRequest, req.Type)
	}
	switch req.Origin {
	case "":
		req.Origin = "start"
	case "start", "end":
	default:
		return req, false, fmt.Errorf("%w: origin must be \"start\" or \"end\", got %q", errBadRequest, req.Origin)
	}
	if raw := q.Get("offset"); raw != "" {
		off, err := strconv.ParseInt(raw, 10, 64)
		if err != nil || off < 0 {
			return req, false, fmt.Errorf("%w: invalid offset %q", errBadRequest, raw)
		}
		req.Offset = off
	}
	follow, err := queryBool(r, "follow", false)
	if err != nil {
		return req, false, err
	}
	req.Follow = follow
	plain, err := queryBool(r, "plain", false)
	if err != nil {
		return req, false, err
	}
	return req, plain, nil
}

// checkTask reports ErrNotFound when the allocation has no such task.
func checkTask(a *structs.Allocation, task string) error {
	if tg := allocGroup(a); tg != nil {
		if tg.LookupTask(task) != nil {
			return nil
		}
	} else if _, ok := a.TaskStates[task]; ok || len(a.TaskStates) == 0 {
		return nil
	}
	return fmt.Errorf("task %q in allocation %s: %w", task, a.ID, ErrNotFound)
}

// streamLogs copies rc to w, raw or framed, flushing after each chunk.
func streamLogs(w http.ResponseWriter, rc io.Reader, plain bool, file string, req LogRequest) error {
	rctl := http.NewResponseController(w)
	enc := json.NewEncoder(w)
	buf := make([]byte, logChunk)
	offset := int64(0)
	if req.Origin == "start" {
		offset = req.Offset
	}
	for {
		n, rerr := rc.Read(buf)
		if n > 0 {
			offset += int64(n)
			var werr error
			if plain {
				_, werr = w.Write(buf[:n])
			} else {
				werr = enc.Encode(&StreamFrame{Offset: offset, Data: buf[:n], File: file})
			}
			if werr != nil {
				return werr
			}
			if err := rctl.Flush(); err != nil {
				return err
			}
		}
		if rerr != nil {
			if errors.Is(rerr, io.EOF) {
				return nil
			}
			return rerr
		}
	}
}
