package docker

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/driver/logging"
)

// Log copying timings.
const (
	// cursorEvery is how often the log cursor is saved while copying.
	cursorEvery = time.Second
	// logRetry is the pause before re-attaching to a broken log stream.
	logRetry = time.Second
	// drainTimeout bounds the wait for the last output after the
	// container exited.
	drainTimeout = 5 * time.Second
)

// Stream types of Docker's multiplexed stream.
const (
	streamStdout = 1
	streamStderr = 2
)

// logCopier copies a container's output into the task's rotated log
// files, following it until the container exits. It resumes after the
// timestamps it last saved, so nothing is copied twice across an agent
// restart.
type logCopier struct {
	d   *Driver
	h   *taskHandle
	pos cursor // last timestamps written, and how many at each
	// atPos counts, per stream, the messages with pos's timestamp this
	// attach has read (follow resets it).
	atPos [3]int
	saved cursor
	// savedAt is when saved was written.
	savedAt time.Time
	// saveErr is the last failure to save the cursor (a full disk): the
	// cursor only spares duplicates after a re-attach, so the copy goes
	// on and the error is logged when it ends.
	saveErr error
	stdout  io.WriteCloser
	stderr  io.WriteCloser
}

// copyLogs runs the copier until the container's output ends or ctx is
// done, then closes h.logsDone.
func (d *Driver) copyLogs(ctx context.Context, h *taskHandle) {
	defer close(h.logsDone)
	logger := d.logger.With("alloc_id", h.cfg.AllocID, "task", h.cfg.Name)
	lc := &logCopier{d: d, h: h, pos: readCursor(h.st.CursorFile)}
	lc.saved = lc.pos
	if err := lc.open(logger); err != nil {
		logger.Error("failed to open task logs", "error", err)
		return
	}
	defer lc.close(logger)
	for {
		err := lc.follow(ctx, true)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			// The stream also ends cleanly when dockerd closes its
			// followers (a daemon restart with live-restore): only a
			// container known to have stopped ends the copy.
			running, known := d.containerRunning(ctx, h.st.ContainerID)
			if known && !running {
				// The followed stream can end before dockerd wrote the
				// last message (a line without its newline is flushed
				// as the container's output closes): read once more
				// from the cursor, which skips what was copied.
				if err := lc.follow(ctx, false); err != nil && ctx.Err() == nil {
					logger.Warn("failed to read the container's last output", "error", err)
				}
				return
			}
		}
		if err != nil {
			logger.Warn("container log stream broke; re-attaching", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(logRetry):
		}
	}
}

func (lc *logCopier) open(logger hclog.Logger) error {
	cfg := lc.h.cfg
	files, size := cfg.LogMaxFiles, cfg.LogMaxFileSizeMB
	if files <= 0 {
		files = driver.DefaultLogMaxFiles
	}
	if size <= 0 {
		size = driver.DefaultLogMaxFileSizeMB
	}
	out, err := logging.NewRotator(cfg.StdoutPath, files, int64(size)<<20, logging.WithLogger(logger))
	if err != nil {
		return err
	}
	errw, err := logging.NewRotator(cfg.StderrPath, files, int64(size)<<20, logging.WithLogger(logger))
	if err != nil {
		out.Close()
		return err
	}
	lc.stdout, lc.stderr = out, errw
	return nil
}

func (lc *logCopier) close(logger hclog.Logger) {
	if err := lc.saveCursor(true); err != nil {
		lc.saveErr = err
	}
	if lc.saveErr != nil {
		logger.Warn("failed to save log cursor; after an agent restart some log lines may repeat", "error", lc.saveErr)
	}
	lc.stdout.Close()
	lc.stderr.Close()
}

// follow streams the logs from the cursor until the stream ends (with
// follow, until the container stops).
func (lc *logCopier) follow(ctx context.Context, follow bool) error {
	c, err := lc.d.docker()
	if err != nil {
		return err
	}
	lc.atPos = [3]int{}
	opts := container.LogsOptions{ShowStdout: true, ShowStderr: true, Follow: follow, Timestamps: true}
	if since := lc.pos.since(); !since.IsZero() {
		opts.Since = since.Format(time.RFC3339Nano)
	}
	rc, err := c.ContainerLogs(ctx, lc.h.st.ContainerID, opts)
	if err != nil {
		return fmt.Errorf("failed to attach to container logs: %w", err)
	}
	defer rc.Close()
	if lc.h.st.TTY {
		return lc.raw(bufio.NewReaderSize(rc, 64*1024))
	}
	return lc.demux(bufio.NewReaderSize(rc, 64*1024))
}

// raw reads a terminal container's output: one stream (stdout) of
// timestamped lines, without frames.
func (lc *logCopier) raw(r *bufio.Reader) error {
	for {
		line, err := r.ReadBytes('\n')
		line = joinPartials(line)
		if len(line) > 0 {
			if werr := lc.write(streamStdout, lc.stdout, line); werr != nil {
				return werr
			}
		}
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("failed to read container logs: %w", err)
		}
	}
}

// demux reads Docker's multiplexed frames (an 8-byte header: stream type,
// 3 zero bytes, big-endian payload size), each one message prefixed with
// its RFC 3339 timestamp, and writes each message newer than its stream's
// cursor.
func (lc *logCopier) demux(r io.Reader) error {
	var hdr [8]byte
	var buf []byte
	for {
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("failed to read container logs: %w", err)
		}
		size := binary.BigEndian.Uint32(hdr[4:])
		if cap(buf) < int(size) {
			buf = make([]byte, size)
		}
		buf = buf[:size]
		if _, err := io.ReadFull(r, buf); err != nil {
			return fmt.Errorf("failed to read container logs: %w", err)
		}
		stream, w := streamStdout, lc.stdout
		if hdr[0] == streamStderr {
			stream, w = streamStderr, lc.stderr
		}
		if err := lc.write(stream, w, buf); err != nil {
			return err
		}
	}
}

// write writes one timestamped message its stream's cursor has not
// copied yet. Messages with the cursor's own timestamp (a re-attach
// resumes there: Docker's since is inclusive) are skipped as many times
// as the cursor counts; later ones extend the count (the partial messages
// of a line longer than 16 KiB share one timestamp).
func (lc *logCopier) write(stream int, w io.Writer, buf []byte) error {
	ts, msg := splitTimestamp(buf)
	if !ts.IsZero() {
		p := &lc.pos[stream]
		switch {
		case ts.Before(p.t):
			return nil // copied before a re-attach
		case ts.Equal(p.t):
			lc.atPos[stream]++
			if lc.atPos[stream] <= p.n {
				return nil // copied before a re-attach
			}
			p.n++
		default:
			*p = cursorPos{t: ts, n: 1}
			lc.atPos[stream] = 1
		}
	}
	if _, err := w.Write(msg); err != nil {
		return fmt.Errorf("failed to write task log: %w", err)
	}
	if err := lc.saveCursor(false); err != nil {
		lc.saveErr = err
	}
	return nil
}

// saveCursor writes the cursor to its file, at most every cursorEvery
// unless final.
func (lc *logCopier) saveCursor(final bool) error {
	if lc.pos.equal(lc.saved) || (!final && time.Since(lc.savedAt) < cursorEvery) {
		return nil
	}
	if err := writeCursor(lc.h.st.CursorFile, lc.pos); err != nil {
		lc.savedAt = time.Now() // try again in cursorEvery, not per line
		return err
	}
	lc.saved = lc.pos
	lc.savedAt = time.Now()
	return nil
}

// joinPartials joins the partial messages of one terminal line: Docker
// splits a line longer than 16 KiB into messages that all carry the first
// one's timestamp, and in a terminal's stream (no frames) they follow each
// other without a newline, each with its "<timestamp> " prefix.
func joinPartials(line []byte) []byte {
	i := bytes.IndexByte(line, ' ')
	if i <= 0 {
		return line
	}
	if _, err := time.Parse(time.RFC3339Nano, string(line[:i])); err != nil {
		return line
	}
	prefix, rest := line[:i+1], line[i+1:]
	if !bytes.Contains(rest, prefix) {
		return line
	}
	return append(append([]byte{}, prefix...), bytes.ReplaceAll(rest, prefix, nil)...)
}

// splitTimestamp splits "<RFC3339Nano> <message>".
func splitTimestamp(b []byte) (time.Time, []byte) {
	i := bytes.IndexByte(b, ' ')
	if i <= 0 {
		return time.Time{}, b
	}
	ts, err := time.Parse(time.RFC3339Nano, string(b[:i]))
	if err != nil {
		return time.Time{}, b
	}
	return ts, b[i+1:]
}

// containerRunning reports whether the container still runs, and whether
// that is known: a container the daemon no longer has is known stopped,
// a daemon that cannot be asked leaves it unknown.
func (d *Driver) containerRunning(ctx context.Context, id string) (running, known bool) {
	c, err := d.docker()
	if err != nil {
		return false, false
	}
	info, err := c.ContainerInspect(ctx, id)
	switch {
	case cerrdefs.IsNotFound(err):
		return false, true
	case err != nil:
		return false, false
	}
	return info.State != nil && info.State.Running, true
}
