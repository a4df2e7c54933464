package proc

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/meshlet/meshlet/driver"
)

// openPTY opens a pseudo-terminal: master is ours, slave (opened without
// becoming our controlling terminal) is the command's. An isolated
// command inherits the slave's descriptor across the task's namespaces
// and chroot; it needs no /dev/pts of its own.
func openPTY() (master, slave *os.File, err error) {
	master, err = os.OpenFile("/dev/ptmx", os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("failed to open pty: %w", err)
	}
	var n uint32
	err = control(master, func(fd int) error {
		if err := unix.IoctlSetPointerInt(fd, unix.TIOCSPTLCK, 0); err != nil {
			return fmt.Errorf("failed to unlock pty: %w", err)
		}
		var err error
		if n, err = unix.IoctlGetUint32(fd, unix.TIOCGPTN); err != nil {
			return fmt.Errorf("failed to get pty number: %w", err)
		}
		return nil
	})
	if err != nil {
		master.Close()
		return nil, nil, err
	}
	slave, err = os.OpenFile("/dev/pts/"+strconv.FormatUint(uint64(n), 10), os.O_RDWR|unix.O_NOCTTY, 0)
	if err != nil {
		master.Close()
		return nil, nil, fmt.Errorf("failed to open pty: %w", err)
	}
	return master, slave, nil
}

// control runs fn on f's descriptor without switching f to blocking mode
// (as f.Fd would), so that closing f still ends a pending Read.
func control(f *os.File, fn func(fd int) error) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var fnErr error
	if err := rc.Control(func(fd uintptr) { fnErr = fn(int(fd)) }); err != nil {
		return err
	}
	return fnErr
}

// setWinsize sets the terminal's size; a zero or out-of-range dimension
// leaves the size as it was.
func setWinsize(master *os.File, sz driver.TerminalSize) error {
	if sz.Height <= 0 || sz.Width <= 0 || sz.Height > 0xffff || sz.Width > 0xffff {
		return nil
	}
	ws := &unix.Winsize{Row: uint16(sz.Height), Col: uint16(sz.Width)}
	return control(master, func(fd int) error { return unix.IoctlSetWinsize(fd, unix.TIOCSWINSZ, ws) })
}

// newTTYSession makes the slave of a new pty the command's stdin, stdout,
// stderr and controlling terminal (in a new session, so Setpgid is off:
// the session leader leads its process group). The sizes already queued
// in opts.Resize are applied now, before the command starts.
func newTTYSession(cmd *exec.Cmd, opts *driver.ExecOptions) (*session, error) {
	master, slave, err := openPTY()
	if err != nil {
		return nil, err
	}
	s := &session{cmd: cmd, opts: opts, child: []*os.File{slave}, outR: []*os.File{master}, tty: master, ended: make(chan struct{})}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = slave, slave, slave
	cmd.SysProcAttr.Setpgid = false
	cmd.SysProcAttr.Setsid, cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, true, 0
	for queued := true; queued && opts.Resize != nil; {
		select {
		case sz, ok := <-opts.Resize:
			if !ok {
				queued = false
				break
			}
			if err := setWinsize(master, sz); err != nil {
				s.closeAll()
				return nil, fmt.Errorf("failed to size pty: %w", err)
			}
		default:
			queued = false
		}
	}
	return s, nil
}

// relayTTY copies stdin into the terminal (without closing it at stdin's
// end: the output still flows) and applies resizes until done closes.
func (s *session) relayTTY(done <-chan struct{}) {
	if s.opts.Stdin != nil {
		go func() { _, _ = io.Copy(s.tty, s.opts.Stdin) }()
	}
	if s.opts.Resize == nil {
		return
	}
	go func() {
		for {
			select {
			case sz, ok := <-s.opts.Resize:
				if !ok {
					return
				}
				_ = setWinsize(s.tty, sz)
			case <-done:
				return
			}
		}
	}()
}
