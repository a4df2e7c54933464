package isolate

import (
	"errors"
	"fmt"
	"strings"

	"golang.org/x/sys/unix"
)

// capNames maps the capability names a task may keep to their numbers.
var capNames = map[string]uintptr{
	"audit_write":      unix.CAP_AUDIT_WRITE,
	"chown":            unix.CAP_CHOWN,
	"dac_override":     unix.CAP_DAC_OVERRIDE,
	"dac_read_search":  unix.CAP_DAC_READ_SEARCH,
	"fowner":           unix.CAP_FOWNER,
	"fsetid":           unix.CAP_FSETID,
	"ipc_lock":         unix.CAP_IPC_LOCK,
	"kill":             unix.CAP_KILL,
	"mknod":            unix.CAP_MKNOD,
	"net_bind_service": unix.CAP_NET_BIND_SERVICE,
	"net_raw":          unix.CAP_NET_RAW,
	"setfcap":          unix.CAP_SETFCAP,
	"setgid":           unix.CAP_SETGID,
	"setpcap":          unix.CAP_SETPCAP,
	"setuid":           unix.CAP_SETUID,
	"sys_chroot":       unix.CAP_SYS_CHROOT,
}

// ErrUnknownCap is returned for a capability name not in capNames.
var ErrUnknownCap = errors.New("unknown capability")

// parseCaps turns names ("chown", "CAP_CHOWN") into a set of numbers.
func parseCaps(names []string) (map[uintptr]bool, error) {
	keep := make(map[uintptr]bool, len(names))
	for _, n := range names {
		c, ok := capNames[strings.TrimPrefix(strings.ToLower(n), "cap_")]
		if !ok {
			return nil, fmt.Errorf("%w %q", ErrUnknownCap, n)
		}
		keep[c] = true
	}
	return keep, nil
}

// restrictThread limits what the calling OS thread, and whatever it execs
// or forks, can ever hold: every capability outside keep is dropped from
// the bounding set, the ambient and inheritable sets are cleared, and
// no_new_privs is set (setuid bits and file capabilities no longer grant
// anything). The caller must hold CAP_SETPCAP and be locked to its thread,
// which must not be handed back to the Go runtime.
func restrictThread(keep map[uintptr]bool) error {
	for c := uintptr(0); c <= 63; c++ {
		if keep[c] {
			continue
		}
		err := unix.Prctl(unix.PR_CAPBSET_DROP, c, 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			break // past the kernel's last capability
		}
		if err != nil {
			return fmt.Errorf("failed to drop capability %d from the bounding set: %w", c, err)
		}
	}
	if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0); err != nil && !errors.Is(err, unix.EINVAL) {
		return fmt.Errorf("failed to clear ambient capabilities: %w", err)
	}
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return fmt.Errorf("failed to read capabilities: %w", err)
	}
	data[0].Inheritable, data[1].Inheritable = 0, 0
	if err := unix.Capset(&hdr, &data[0]); err != nil {
		return fmt.Errorf("failed to clear inheritable capabilities: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("failed to set no_new_privs: %w", err)
	}
	return nil
}
