package command

import (
	"bytes"
	"fmt"
	"io"

	nomadapi "github.com/hashicorp/nomad/api"
)

func init() {
	register(&command{
		name: "alloc logs", args: "[options] ALLOC [TASK]", synopsis: "Print or follow a task's stdout or stderr",
		help: `Prints the logs of TASK in allocation ALLOC (an ID or unique prefix). TASK may
be omitted when the allocation has a single task. Reads stdout unless
-stderr. With -f, keeps following new output until interrupted (Ctrl-C).
With -tail (or -n), starts from the last LINES lines.`,
		example: "$ meshlet alloc logs 8c3a web\n$ meshlet alloc logs -stderr -f -n 20 8c3a web",
		run:     runAllocLogs,
	})
}

const (
	defaultTailLines = 10
	// tailProbeBytes per wanted line is the first guess of how far back
	// from the end the last lines start; the guess grows until it holds
	// enough lines.
	tailProbeBytes = 256
	maxTailProbe   = 64 << 20
)

type logsOptions struct {
	task, stream string
	follow       bool
	tail         bool
	lines        int
}

func runAllocLogs(e *env, c *command, args []string) int {
	fs := newFlags(c)
	addr := addressFlag(fs)
	stderr := fs.Bool("stderr", false, "read stderr instead of stdout")
	follow := fs.Bool("f", false, "follow the log until interrupted")
	tail := fs.Bool("tail", false, "start from the end (the last -n lines, default 10)")
	lines := fs.Int("n", -1, "with -tail: number of `LINES` to print from the end (implies -tail)")
	if code, ok := e.parse(c, fs, args); !ok {
		return code
	}
	if fs.NArg() < 1 || fs.NArg() > 2 || fs.Arg(0) == "" {
		return e.usageError(c, "expected ALLOC and an optional TASK")
	}
	opts := logsOptions{stream: "stdout", follow: *follow, tail: *tail || *lines >= 0, lines: *lines}
	if *stderr {
		opts.stream = "stderr"
	}
	if opts.tail && opts.lines < 0 {
		opts.lines = defaultTailLines
	}
	client, err := nomadClient(addr)
	if err != nil {
		return e.errorf("%v", err)
	}
	alloc, _, err := client.Allocations().Info(fs.Arg(0), nil)
	if err != nil {
		return e.errorf("failed to query allocation %q: %s", fs.Arg(0), describe(err, addr.Addr))
	}
	if opts.task, err = pickTask(alloc, fs.Arg(1)); err != nil {
		return e.errorf("%v", err)
	}
	if err := e.printLogs(client, alloc, opts); err != nil {
		if e.ctx.Err() != nil {
			return exitOK // interrupted while following: the normal way out
		}
		return e.errorf("failed to read logs of task %q: %s", opts.task, describe(err, addr.Addr))
	}
	return exitOK
}

func (e *env) printLogs(client *nomadapi.Client, alloc *nomadapi.Allocation, o logsOptions) error {
	if !o.tail {
		return e.streamLogs(client, alloc, o, "start", 0, e.stdout)
	}
	tailData, err := e.probeTail(client, alloc, o)
	if err != nil {
		return err
	}
	if !o.follow {
		_, err := e.stdout.Write(lastLines(tailData, o.lines))
		return err
	}
	// Follow from exactly where the probe began: the first len(tailData)
	// bytes of the stream are the tail already known; print their last
	// lines, then everything after them.
	w := &skipWriter{skip: len(tailData), lines: o.lines, out: e.stdout}
	return e.streamLogs(client, alloc, o, "end", int64(len(tailData)), w)
}

// probeTail reads back from the end until it holds more than o.lines
// lines or the whole log.
func (e *env) probeTail(client *nomadapi.Client, alloc *nomadapi.Allocation, o logsOptions) ([]byte, error) {
	want := int64(max(o.lines, 1)) * tailProbeBytes
	for {
		var buf bytes.Buffer
		probe := o
		probe.follow = false
		if err := e.streamLogs(client, alloc, probe, "end", want, &buf); err != nil {
			return nil, err
		}
		data := buf.Bytes()
		if int64(len(data)) < want || bytes.Count(data, []byte("\n")) > o.lines || want >= maxTailProbe {
			return data, nil
		}
		want *= 4
	}
}

// streamLogs copies the log frames to w until the stream ends (or, when
// following, until the context is cancelled).
func (e *env) streamLogs(client *nomadapi.Client, alloc *nomadapi.Allocation, o logsOptions, origin string, offset int64, w io.Writer) error {
	cancel := make(chan struct{})
	defer close(cancel)
	q := (&nomadapi.QueryOptions{}).WithContext(e.ctx)
	frames, errCh := client.AllocFS().Logs(alloc, o.follow, o.task, o.stream, origin, offset, cancel, q)
	for {
		select {
		case f, ok := <-frames:
			if !ok {
				return nil
			}
			if _, err := w.Write(f.Data); err != nil {
				return fmt.Errorf("failed to write logs: %w", err)
			}
		case err := <-errCh:
			return err
		case <-e.ctx.Done():
			return e.ctx.Err()
		}
	}
}

// lastLines returns the last n lines of data (a trailing partial line
// counts as a line).
func lastLines(data []byte, n int) []byte {
	if n <= 0 {
		return nil
	}
	end := len(data)
	if end > 0 && data[end-1] == '\n' {
		end--
	}
	for i := end - 1; i >= 0; i-- {
		if data[i] == '\n' {
			n--
			if n == 0 {
				return data[i+1:]
			}
		}
	}
	return data
}

// skipWriter buffers the first skip bytes, then writes their last lines
// and passes everything after them through.
type skipWriter struct {
	skip  int
	lines int
	buf   []byte
	out   io.Writer
}

func (s *skipWriter) Write(p []byte) (int, error) {
	n := len(p)
	if s.skip > 0 {
		take := min(s.skip, len(p))
		s.buf = append(s.buf, p[:take]...)
		s.skip -= take
		p = p[take:]
		if s.skip > 0 {
			return n, nil
		}
		if _, err := s.out.Write(lastLines(s.buf, s.lines)); err != nil {
			return 0, err
		}
		s.buf = nil
	}
	if len(p) > 0 {
		if _, err := s.out.Write(p); err != nil {
			return 0, err
		}
	}
	return n, nil
}
