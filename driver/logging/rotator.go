// Package logging owns task log files: the size-bounded rotating writer the
// executor writes a task's stdout/stderr into, and the reader the agent uses
// to serve `alloc logs` across rotated files, optionally following new output.
//
// Files follow Nomad's naming: "<dir>/<task>.<stream>.<index>", index counting
// up from 0; at most MaxFiles of them are kept, the oldest removed first.
//
// A rotation that fails (a full disk, a name the task blocked with a
// directory it filled) does not cost the output: the rotator writes on to
// the current file, over its limit, logs the failure once, and tries again
// after a pause that doubles up to a minute, not on every write. A name it
// cannot clear is skipped for the next one.
//
// Concurrency: a Rotator is safe for concurrent use (one mutex guards the
// current file). A Reader is used by one goroutine at a time; Close may be
// called concurrently with Read and unblocks a following Read.
package logging

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/meshlet/meshlet/internal/nofollow"
)

// Rotation retry timing and reach.
const (
	// rotateRetryMin is the pause after a failed rotation before the next
	// try; it doubles on each further failure up to rotateRetryMax.
	rotateRetryMin = time.Second
	rotateRetryMax = time.Minute
	// maxSkip is how many indexes one rotation tries: a name that cannot
	// be cleared (errBlocked) is skipped for the next.
	maxSkip = 4
)

// errBlocked marks a log file's name taken by something that cannot be
// removed to make way for the log file.
var errBlocked = errors.New("log file name blocked")

// ErrClosed is returned by writes to a closed Rotator.
var ErrClosed = errors.New("log file closed")

// Rotator is an io.WriteCloser that writes to "<base>.<n>" and moves on to
// "<base>.<n+1>" once the current file reaches maxSize bytes, deleting files
// so that at most maxFiles remain.
type Rotator struct {
	base     string
	dir      *os.File // the log directory, opened without following a symlink
	name     string   // base's last element
	maxFiles int
	maxSize  int64
	logger   hclog.Logger
	now      func() time.Time // the clock; tests replace it

	mu     sync.Mutex
	f      *os.File
	idx    int
	size   int64
	closed bool
	// retryWait is the pause since the last failed rotation, zero while
	// rotations succeed; retryAt is when the next may be tried.
	retryWait time.Duration
	retryAt   time.Time
}

// Option configures a Rotator.
type Option func(*Rotator)

// WithLogger sets where a failed rotation is reported (default: nowhere).
func WithLogger(l hclog.Logger) Option {
	return func(r *Rotator) { r.logger = l }
}

// NewRotator opens a rotating writer on base (e.g. "<dir>/web.stdout"). It
// continues the highest-numbered existing file, so a restarted writer appends
// rather than overwriting. The directory is created if needed; a symlink in
// its place is refused. Anything but a regular file at a log file's name (a
// symlink, FIFO or directory the task planted) is removed and replaced by a
// fresh file.
func NewRotator(base string, maxFiles int, maxSize int64, opts ...Option) (*Rotator, error) {
	if maxFiles < 1 {
		return nil, fmt.Errorf("failed to open log %s: max files must be at least 1, got %d", base, maxFiles)
	}
	if maxSize < 1 {
		return nil, fmt.Errorf("failed to open log %s: max file size must be positive, got %d", base, maxSize)
	}
	if err := os.MkdirAll(filepath.Dir(base), 0o755); err != nil {
		return nil, fmt.Errorf("failed to create log directory: %w", err)
	}
	dir, err := nofollow.OpenDir(filepath.Dir(base))
	if err != nil {
		return nil, fmt.Errorf("failed to open log directory: %w", err)
	}
	r := &Rotator{
		base: base, dir: dir, name: filepath.Base(base), maxFiles: maxFiles, maxSize: maxSize,
		logger: hclog.NewNullLogger(), now: time.Now,
	}
	for _, o := range opts {
		o(r)
	}
	idxs, err := listIndexesAt(dir, r.name+".")
	if err != nil {
		dir.Close()
		return nil, err
	}
	if len(idxs) > 0 {
		r.idx = idxs[len(idxs)-1]
	}
	if err := r.open(); err != nil {
		dir.Close()
		return nil, err
	}
	if r.size >= r.maxSize {
		r.tryRotate()
	}
	r.purge()
	return r, nil
}

// Write writes p, splitting it across files at the size boundary. While
// rotations fail it writes on to the current file; only a failed write is
// an error.
func (r *Rotator) Write(p []byte) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return 0, ErrClosed
	}
	written := 0
	for len(p) > 0 {
		if r.size >= r.maxSize && !r.now().Before(r.retryAt) && r.tryRotate() {
			// The next file may already be full (left by an earlier
			// configuration, or planted by the task): look again.
			continue
		}
		chunk := p
		if room := r.maxSize - r.size; room > 0 && int64(len(chunk)) > room {
			chunk = chunk[:room]
		}
		n, err := r.f.Write(chunk)
		written += n
		r.size += int64(n)
		if err != nil {
			return written, fmt.Errorf("failed to write log %s: %w", r.f.Name(), err)
		}
		p = p[n:]
	}
	return written, nil
}

// Close closes the current file. Further writes fail with ErrClosed.
func (r *Rotator) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return nil
	}
	r.closed = true
	err := r.f.Close()
	if derr := r.dir.Close(); err == nil {
		err = derr
	}
	return err
}

// open opens (appending) the file for r.idx. Caller owns r.
func (r *Rotator) open() error {
	f, size, err := r.openIndex(r.idx)
	if err != nil {
		return err
	}
	r.f, r.size = f, size
	return nil
}

// openIndex opens (appending) the file for idx and returns it with its size.
func (r *Rotator) openIndex(idx int) (*os.File, int64, error) {
	name := fileName(r.name, idx)
	f, err := openRegular(r.dir, name, unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT)
	if errors.Is(err, ErrNotRegular) {
		// Planted by the task: replace it with a fresh file.
		if err := removeAt(r.dir, name); err != nil {
			return nil, 0, fmt.Errorf("failed to replace log %s: %w: %w", name, errBlocked, err)
		}
		f, err = openRegular(r.dir, name, unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT|unix.O_EXCL)
		if errors.Is(err, unix.EEXIST) || errors.Is(err, ErrNotRegular) {
			err = fmt.Errorf("failed to replace log %s: %w: %w", name, errBlocked, err) // planted again
		}
	}
	if err != nil {
		return nil, 0, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, 0, fmt.Errorf("failed to stat log %s: %w", f.Name(), err)
	}
	return f, st.Size(), nil
}

// tryRotate rotates, or, if that fails, leaves the rotator on the current
// file and sets when to try again. A run of failures is logged once, at
// its start. It reports whether the rotator moved on.
func (r *Rotator) tryRotate() bool {
	err := r.rotate()
	if err == nil {
		if r.retryWait > 0 {
			r.logger.Info("log rotation works again", "file", r.f.Name())
		}
		r.retryWait, r.retryAt = 0, time.Time{}
		return true
	}
	if r.retryWait == 0 {
		r.retryWait = rotateRetryMin
		r.logger.Warn("failed to rotate log; writing on to the current file",
			"file", r.f.Name(), "retry_in", r.retryWait, "error", err)
	} else {
		r.retryWait = min(2*r.retryWait, rotateRetryMax)
	}
	r.retryAt = r.now().Add(r.retryWait)
	return false
}

// rotate moves on to the next index whose file can be opened, skipping up
// to maxSkip names something uncleared blocks, and removes files beyond
// maxFiles. The next file is opened before the current one is closed: if
// none can be opened the rotator stays on the current file.
func (r *Rotator) rotate() error {
	var err error
	for next := r.idx + 1; next <= r.idx+maxSkip; next++ {
		var f *os.File
		var size int64
		f, size, err = r.openIndex(next)
		if errors.Is(err, errBlocked) {
			continue
		}
		if err != nil {
			return err
		}
		old := r.f
		r.f, r.idx, r.size = f, next, size
		r.purge()
		if err := old.Close(); err != nil {
			r.logger.Warn("failed to close rotated log", "file", old.Name(), "error", err)
		}
		return nil
	}
	return err
}

// purge removes every file older than the newest maxFiles. Removal errors
// are ignored: a file that cannot be removed is retried on the next rotation.
func (r *Rotator) purge() {
	idxs, err := listIndexesAt(r.dir, r.name+".")
	if err != nil {
		return
	}
	for _, i := range idxs {
		if i <= r.idx-r.maxFiles {
			_ = removeAt(r.dir, fileName(r.name, i))
		}
	}
}

func fileName(base string, idx int) string {
	return base + "." + strconv.Itoa(idx)
}
