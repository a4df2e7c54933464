package command

import (
	"bytes"
	"fmt"
	"io"
	"os"

	nomadapi "github.com/hashicorp/nomad/api"
	"golang.org/x/sys/unix"
)

func init() {
	register(&command{
		name: "alloc exec", args: "[options] ALLOC COMMAND [ARGS...]", synopsis: "Run a command inside a running task",
		help: `Runs COMMAND in the context of a task of allocation ALLOC (an ID or unique
prefix): its network namespace, environment and working directory. -task may
be omitted when the allocation has a single task. Standard input is
forwarded (-i, on by default); -t asks for a terminal (default: when both
stdin and stdout are terminals). The command's exit code becomes meshlet's.`,
		example: "$ meshlet alloc exec -task web 8c3a /bin/sh -c 'curl -s localhost:9001'\n$ meshlet alloc exec -t -task web 8c3a /bin/sh",
		run:     runAllocExec,
	})
}

func runAllocExec(e *env, c *command, args []string) int {
	fs := newFlags(c)
	addr := addressFlag(fs)
	task := fs.String("task", "", "`TASK` to run in (optional when the allocation has one task)")
	interactive := fs.Bool("i", true, "forward standard input")
	tty := fs.Bool("t", isTerminal(e.stdin) && isTerminal(e.stdout), "allocate a terminal (raw mode locally)")
	if code, ok := e.parse(c, fs, args); !ok {
		return code
	}
	if fs.NArg() < 2 || fs.Arg(0) == "" {
		return e.usageError(c, "expected ALLOC and a COMMAND")
	}
	client, err := nomadClient(addr)
	if err != nil {
		return e.errorf("%v", err)
	}
	alloc, _, err := client.Allocations().Info(fs.Arg(0), nil)
	if err != nil {
		return e.errorf("failed to query allocation %q: %s", fs.Arg(0), describe(err, addr.Addr))
	}
	name, err := pickTask(alloc, *task)
	if err != nil {
		return e.errorf("%v", err)
	}
	stdin := e.stdin
	if !*interactive {
		stdin = bytes.NewReader(nil)
	}
	var sizeCh chan nomadapi.TerminalSize
	if *tty {
		restore, err := makeRaw(e.stdin)
		if err != nil {
			return e.errorf("%v", err)
		}
		defer restore()
		sizeCh = make(chan nomadapi.TerminalSize, 1)
		if size, ok := terminalSize(e.stdout); ok {
			sizeCh <- size
		}
	}
	code, err := client.Allocations().Exec(e.ctx, alloc, name, *tty, fs.Args()[1:], stdin, e.stdout, e.stderr, sizeCh, nil)
	if err != nil {
		if e.ctx.Err() != nil {
			return exitInterrupted
		}
		return e.errorf("failed to exec in task %q of allocation %q: %s", name, short(alloc.ID), describe(err, addr.Addr))
	}
	return code
}

// isTerminal reports whether v is a terminal file.
func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

// makeRaw puts the terminal on r into raw mode and returns the undo.
func makeRaw(r io.Reader) (func(), error) {
	f, ok := r.(*os.File)
	if !ok || !isTerminal(f) {
		return func() {}, nil
	}
	fd := int(f.Fd())
	old, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return nil, fmt.Errorf("failed to read the terminal mode: %w", err)
	}
	raw := *old
	raw.Iflag &^= unix.IGNBRK | unix.BRKINT | unix.PARMRK | unix.ISTRIP | unix.INLCR | unix.IGNCR | unix.ICRNL | unix.IXON
	raw.Oflag &^= unix.OPOST
	raw.Lflag &^= unix.ECHO | unix.ECHONL | unix.ICANON | unix.ISIG | unix.IEXTEN
	raw.Cflag &^= unix.CSIZE | unix.PARENB
	raw.Cflag |= unix.CS8
	raw.Cc[unix.VMIN], raw.Cc[unix.VTIME] = 1, 0
	if err := unix.IoctlSetTermios(fd, unix.TCSETS, &raw); err != nil {
		return nil, fmt.Errorf("failed to set the terminal to raw mode: %w", err)
	}
	return func() { _ = unix.IoctlSetTermios(fd, unix.TCSETS, old) }, nil
}

// terminalSize reads the window size of the terminal on w.
func terminalSize(w io.Writer) (nomadapi.TerminalSize, bool) {
	f, ok := w.(*os.File)
	if !ok {
		return nomadapi.TerminalSize{}, false
	}
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return nomadapi.TerminalSize{}, false
	}
	return nomadapi.TerminalSize{Height: int(ws.Row), Width: int(ws.Col)}, true
}
