package xds

import (
	"errors"
	"fmt"
	"net"
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// AllocOption tunes an allocation socket.
type AllocOption func(*allocListener) error

// ErrPeerNamespace: a connection to an allocation's socket came from a
// process outside that allocation's network namespace.
var ErrPeerNamespace = errors.New("peer is not in the allocation's network namespace")

// WithPeerNetNS admits only connections from processes in the network
// namespace bound at netnsPath (the allocation's), checked with
// SO_PEERCRED. Task directories are readable by every task on the node, so
// without it a task could open another allocation's socket and act as that
// allocation's sidecar.
func WithPeerNetNS(netnsPath string) AllocOption {
	return func(l *allocListener) error {
		if netnsPath == "" {
			return nil
		}
		id, err := nsID(netnsPath)
		if err != nil {
			return fmt.Errorf("failed to read allocation network namespace: %w", err)
		}
		l.netns = &id
		return nil
	}
}

// nsIdentity names a namespace: device and inode of its nsfs file.
type nsIdentity struct{ dev, ino uint64 }

func nsID(path string) (nsIdentity, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nsIdentity{}, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return nsIdentity{}, fmt.Errorf("no stat for %s", path)
	}
	return nsIdentity{dev: st.Dev, ino: st.Ino}, nil
}

// checkPeerNetNS verifies that the process at the other end of c lives in
// the namespace want.
func checkPeerNetNS(c net.Conn, want nsIdentity) error {
	uc, ok := c.(*net.UnixConn)
	if !ok {
		return fmt.Errorf("%w: not a unix socket connection", ErrPeerNamespace)
	}
	raw, err := uc.SyscallConn()
	if err != nil {
		return fmt.Errorf("failed to read peer credentials: %w", err)
	}
	var cred *unix.Ucred
	var credErr error
	if err := raw.Control(func(fd uintptr) {
		cred, credErr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil || credErr != nil {
		return fmt.Errorf("failed to read peer credentials: %w", errors.Join(err, credErr))
	}
	got, err := nsID(fmt.Sprintf("/proc/%d/ns/net", cred.Pid))
	if err != nil {
		return fmt.Errorf("%w: pid %d: %w", ErrPeerNamespace, cred.Pid, err)
	}
	if got != want {
		return fmt.Errorf("%w: pid %d", ErrPeerNamespace, cred.Pid)
	}
	return nil
}
