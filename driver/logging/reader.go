package logging

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/meshlet/meshlet/internal/nofollow"
)

// Reader origins.
const (
	OriginStart = "start"
	OriginEnd   = "end"
)

// ErrNoLogs is returned by NewReader (without follow) when the task has not
// written any log file yet.
var ErrNoLogs = errors.New("no log files")

// pollInterval is how often a following reader looks for new data.
const pollInterval = 100 * time.Millisecond

// reader streams "<dir>/<task>.<stream>.<n>" files in index order. The
// directory is writable by the task: files are opened relative to it
// without following symlinks or blocking, and only regular files are read
// (anything else at a log file's name is skipped as if absent).
type reader struct {
	ctx    context.Context
	logDir string
	name   string // "<task>.<stream>"
	follow bool
	done   chan struct{}
	once   sync.Once

	mu  sync.Mutex // guards dir, f and idx
	dir *os.File   // nil until the directory exists
	f   *os.File
	idx int
}

// NewReader opens the task's stream ("stdout" or "stderr") in logDir for
// reading across rotated files. origin "start" counts offset bytes from the
// beginning of the oldest file still on disk, "end" counts back from the end
// of the newest. With follow, reads block for new data (including data in
// files rotated in later) until Close.
func NewReader(logDir, task, stream, origin string, offset int64, follow bool) (io.ReadCloser, error) {
	return NewReaderContext(context.Background(), logDir, task, stream, origin, offset, follow)
}

// NewReaderContext is NewReader whose following reads also end (io.EOF) when
// ctx is done.
func NewReaderContext(ctx context.Context, logDir, task, stream, origin string, offset int64, follow bool) (io.ReadCloser, error) {
	if err := validateReaderArgs(task, stream, origin, offset); err != nil {
		return nil, err
	}
	r := &reader{
		ctx:    ctx,
		logDir: logDir,
		name:   task + "." + stream,
		follow: follow,
		done:   make(chan struct{}),
		idx:    -1,
	}
	if err := r.position(origin, offset); err != nil {
		r.Close()
		return nil, err
	}
	return r, nil
}

func validateReaderArgs(task, stream, origin string, offset int64) error {
	switch {
	case task == "" || strings.ContainsAny(task, "/\x00") || task == "." || task == "..":
		return fmt.Errorf("failed to open logs: invalid task name %q", task)
	case stream != "stdout" && stream != "stderr":
		return fmt.Errorf("failed to open logs: stream must be \"stdout\" or \"stderr\", got %q", stream)
	case origin != OriginStart && origin != OriginEnd:
		return fmt.Errorf("failed to open logs: origin must be %q or %q, got %q", OriginStart, OriginEnd, origin)
	case offset < 0:
		return fmt.Errorf("failed to open logs: offset must not be negative, got %d", offset)
	}
	return nil
}

// position opens the file holding the requested offset and seeks to it.
func (r *reader) position(origin string, offset int64) error {
	idxs, err := r.indexes()
	if err != nil {
		return err
	}
	if len(idxs) == 0 {
		if !r.follow {
			return fmt.Errorf("failed to open logs %s: %w", filepath.Join(r.logDir, r.name), ErrNoLogs)
		}
		return nil // Read waits for the first file.
	}
	sizes := make([]int64, len(idxs))
	for i, idx := range idxs {
		var st unix.Stat_t
		err := unix.Fstatat(int(r.dir.Fd()), fileName(r.name, idx), &st, unix.AT_SYMLINK_NOFOLLOW)
		if err == nil && st.Mode&unix.S_IFMT == unix.S_IFREG {
			sizes[i] = st.Size
		}
	}
	pos, at := locate(sizes, origin, offset)
	f, err := openRegular(r.dir, fileName(r.name, idxs[pos]), unix.O_RDONLY)
	if err != nil {
		return fmt.Errorf("failed to open log: %w", err)
	}
	if _, err := f.Seek(at, io.SeekStart); err != nil {
		f.Close()
		return fmt.Errorf("failed to seek log %s: %w", f.Name(), err)
	}
	r.f, r.idx = f, idxs[pos]
	return nil
}

// locate maps (origin, offset) onto a file position (index into sizes) and a
// byte offset within it, clamping to the available data.
func locate(sizes []int64, origin string, offset int64) (int, int64) {
	last := len(sizes) - 1
	if origin == OriginStart {
		for i, sz := range sizes {
			if offset < sz {
				return i, offset
			}
			offset -= sz
		}
		return last, sizes[last]
	}
	for i := last; i >= 0; i-- {
		if offset <= sizes[i] {
			return i, sizes[i] - offset
		}
		offset -= sizes[i]
	}
	return 0, 0
}

// Read implements io.Reader across rotations.
func (r *reader) Read(p []byte) (int, error) {
	for {
		if r.stopped() {
			return 0, io.EOF
		}
		n, moved, err := r.readOnce(p)
		if n > 0 || err != nil {
			return n, err
		}
		if moved {
			continue
		}
		if !r.follow {
			return 0, io.EOF
		}
		select {
		case <-r.done:
			return 0, io.EOF
		case <-r.ctx.Done():
			return 0, io.EOF
		case <-time.After(pollInterval):
		}
	}
}

// readOnce reads from the current file; at its end it moves to the next
// file if one exists (moved=true). n == 0 and !moved means "no data yet".
func (r *reader) readOnce(p []byte) (n int, moved bool, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.stopped() {
		return 0, false, nil // Read returns io.EOF
	}
	if r.f != nil {
		n, err = r.f.Read(p)
		if n > 0 {
			return n, false, nil
		}
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, false, fmt.Errorf("failed to read log %s: %w", r.f.Name(), err)
		}
	}
	next, ok, err := r.nextIndex()
	if err != nil || !ok {
		return 0, false, err
	}
	if r.f != nil {
		// The writer only creates the next file after it is done with the
		// current one: drain what was written before the rotation.
		if n, _ = r.f.Read(p); n > 0 {
			return n, false, nil
		}
		r.f.Close()
	}
	f, err := openRegular(r.dir, fileName(r.name, next), unix.O_RDONLY)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) || errors.Is(err, ErrNotRegular) {
			// Rotated away already, or not a log file: look further.
			r.f, r.idx = nil, next
			return 0, true, nil
		}
		return 0, false, fmt.Errorf("failed to open log: %w", err)
	}
	r.f, r.idx = f, next
	return 0, true, nil
}

// nextIndex returns the lowest existing index above the current one.
func (r *reader) nextIndex() (int, bool, error) {
	idxs, err := r.indexes()
	if err != nil {
		return 0, false, err
	}
	for _, i := range idxs {
		if i > r.idx {
			return i, true, nil
		}
	}
	return 0, false, nil
}

// indexes lists the indexes of the existing log files, opening the directory
// (refusing a symlink in its place) once it exists. Caller holds mu or owns r.
func (r *reader) indexes() ([]int, error) {
	if r.dir == nil {
		dir, err := nofollow.OpenDir(r.logDir)
		if errors.Is(err, os.ErrNotExist) {
			return nil, nil
		}
		if err != nil {
			return nil, fmt.Errorf("failed to open log directory: %w", err)
		}
		r.dir = dir
	}
	return listIndexesAt(r.dir, r.name+".")
}

func (r *reader) stopped() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// Close stops the reader; a blocked following Read returns io.EOF.
func (r *reader) Close() error {
	r.once.Do(func() { close(r.done) })
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.dir != nil {
		r.dir.Close()
		r.dir = nil
	}
	if r.f == nil {
		return nil
	}
	err := r.f.Close()
	r.f = nil
	if err != nil {
		return fmt.Errorf("failed to close log: %w", err)
	}
	return nil
}
