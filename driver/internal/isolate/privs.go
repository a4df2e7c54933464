package isolate

import (
	"errors"
	"fmt"

	"golang.org/x/sys/unix"
)

// restrictThread limits what the calling OS thread, and whatever it execs
// or forks, can ever hold: every capability outside keep is dropped from
// the bounding set, the ambient and inheritable sets are cleared, and
// no_new_privs is set (setuid bits and file capabilities no longer grant
// anything). The caller must hold CAP_SETPCAP and be locked to its thread,
// which must not be handed back to the Go runtime.
func restrictThread(keep CapSet) error {
	for c := uint(0); c <= 63; c++ {
		if keep.Has(c) {
			continue
		}
		err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0)
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
	if err := setCaps(func(d *[2]unix.CapUserData) { d[0].Inheritable, d[1].Inheritable = 0, 0 }); err != nil {
		return fmt.Errorf("failed to clear inheritable capabilities: %w", err)
	}
	if err := unix.Prctl(unix.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("failed to set no_new_privs: %w", err)
	}
	return nil
}

// keepCapsAcrossSetuid makes the calling thread keep its permitted set
// when it switches from root to another user (the ambient set is cleared
// regardless, so raiseAmbient must follow the switch). execve clears the
// flag.
func keepCapsAcrossSetuid() error {
	if err := unix.Prctl(unix.PR_SET_KEEPCAPS, 1, 0, 0, 0); err != nil {
		return fmt.Errorf("failed to keep capabilities across the user switch: %w", err)
	}
	return nil
}

// raiseAmbient makes amb the calling thread's permitted, inheritable and
// ambient sets (and clears its effective set), so that a program it execs
// as a non-root user holds exactly amb. It must run after the switch to
// that user, with keepCapsAcrossSetuid called before it; amb must lie in
// the bounding set.
func raiseAmbient(amb CapSet) error {
	lo, hi := uint32(amb), uint32(amb>>32)
	err := setCaps(func(d *[2]unix.CapUserData) {
		d[0].Permitted, d[1].Permitted = lo, hi
		d[0].Inheritable, d[1].Inheritable = lo, hi
		d[0].Effective, d[1].Effective = 0, 0
	})
	if err != nil {
		return fmt.Errorf("failed to set inheritable capabilities: %w", err)
	}
	for c := uint(0); c < 64; c++ {
		if !amb.Has(c) {
			continue
		}
		if err := unix.Prctl(unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_RAISE, uintptr(c), 0, 0); err != nil {
			return fmt.Errorf("failed to raise ambient capability %s: %w", CapSet(1)<<c, err)
		}
	}
	return nil
}

// setCaps reads the calling thread's capability sets, lets edit change
// them and writes them back.
func setCaps(edit func(*[2]unix.CapUserData)) error {
	hdr := unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	var data [2]unix.CapUserData
	if err := unix.Capget(&hdr, &data[0]); err != nil {
		return err
	}
	edit(&data)
	return unix.Capset(&hdr, &data[0])
}

// ambientFor is the part of a task's added capabilities that its user gets
// as ambient capabilities: all of them for a non-root user, none for root
// (whose effective set is its bounding set anyway).
func ambientFor(uid uint32, added CapSet) CapSet {
	if uid == 0 {
		return 0
	}
	return added
}

// ambientCaps lists s by number, as syscall.SysProcAttr.AmbientCaps takes.
func ambientCaps(s CapSet) []uintptr {
	var out []uintptr
	for c := uint(0); c < 64; c++ {
		if s.Has(c) {
			out = append(out, uintptr(c))
		}
	}
	return out
}
