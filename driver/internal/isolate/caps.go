package isolate

import (
	"errors"
	"fmt"
	"math/bits"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Sentinel errors of capability names and sets.
var (
	// ErrUnknownCap is returned for a name that is no capability this
	// kernel supports.
	ErrUnknownCap = errors.New("capabilities not supported by system")
	// ErrCapNotAllowed is returned when a task adds a capability outside
	// the driver's allow_caps.
	ErrCapNotAllowed = errors.New("driver does not allow the following capabilities")
)

// capByName maps every Linux capability's name (lower case, without the
// "cap_" prefix) to its number.
var capByName = map[string]uint{
	"chown": unix.CAP_CHOWN, "dac_override": unix.CAP_DAC_OVERRIDE,
	"dac_read_search": unix.CAP_DAC_READ_SEARCH, "fowner": unix.CAP_FOWNER,
	"fsetid": unix.CAP_FSETID, "kill": unix.CAP_KILL, "setgid": unix.CAP_SETGID,
	"setuid": unix.CAP_SETUID, "setpcap": unix.CAP_SETPCAP,
	"linux_immutable": unix.CAP_LINUX_IMMUTABLE, "net_bind_service": unix.CAP_NET_BIND_SERVICE,
	"net_broadcast": unix.CAP_NET_BROADCAST, "net_admin": unix.CAP_NET_ADMIN,
	"net_raw": unix.CAP_NET_RAW, "ipc_lock": unix.CAP_IPC_LOCK, "ipc_owner": unix.CAP_IPC_OWNER,
	"sys_module": unix.CAP_SYS_MODULE, "sys_rawio": unix.CAP_SYS_RAWIO,
	"sys_chroot": unix.CAP_SYS_CHROOT, "sys_ptrace": unix.CAP_SYS_PTRACE,
	"sys_pacct": unix.CAP_SYS_PACCT, "sys_admin": unix.CAP_SYS_ADMIN, "sys_boot": unix.CAP_SYS_BOOT,
	"sys_nice": unix.CAP_SYS_NICE, "sys_resource": unix.CAP_SYS_RESOURCE,
	"sys_time": unix.CAP_SYS_TIME, "sys_tty_config": unix.CAP_SYS_TTY_CONFIG,
	"mknod": unix.CAP_MKNOD, "lease": unix.CAP_LEASE, "audit_write": unix.CAP_AUDIT_WRITE,
	"audit_control": unix.CAP_AUDIT_CONTROL, "setfcap": unix.CAP_SETFCAP,
	"mac_override": unix.CAP_MAC_OVERRIDE, "mac_admin": unix.CAP_MAC_ADMIN,
	"syslog": unix.CAP_SYSLOG, "wake_alarm": unix.CAP_WAKE_ALARM,
	"block_suspend": unix.CAP_BLOCK_SUSPEND, "audit_read": unix.CAP_AUDIT_READ,
	"perfmon": unix.CAP_PERFMON, "bpf": unix.CAP_BPF, "checkpoint_restore": unix.CAP_CHECKPOINT_RESTORE,
}

// CapSet is a set of capabilities: bit n is capability number n.
type CapSet uint64

// Has reports whether c is in s.
func (s CapSet) Has(c uint) bool { return c < 64 && s&(1<<c) != 0 }

// Names returns s's capability names (lower case, no prefix), sorted.
func (s CapSet) Names() []string {
	names := make([]string, 0, bits.OnesCount64(uint64(s)))
	for name, c := range capByName {
		if s.Has(c) {
			names = append(names, name)
		}
	}
	sort.Strings(names)
	return names
}

// String lists s's names, comma separated, as Nomad's messages do.
func (s CapSet) String() string { return strings.Join(s.Names(), ", ") }

var (
	supportedOnce sync.Once
	supported     CapSet
)

// SupportedCaps is every capability the running kernel knows
// (/proc/sys/kernel/cap_last_cap); every named one if that is unreadable.
func SupportedCaps() CapSet {
	supportedOnce.Do(func() {
		last := uint(63)
		if b, err := os.ReadFile("/proc/sys/kernel/cap_last_cap"); err == nil {
			if n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 6); err == nil {
				last = uint(n)
			}
		}
		for _, c := range capByName {
			if c <= last {
				supported |= 1 << c
			}
		}
	})
	return supported
}

// ParseCaps turns capability names into a set. Names are case-insensitive,
// with or without the "CAP_" prefix; "all" is every supported capability.
// Unknown or unsupported names are an error wrapping ErrUnknownCap that
// lists them all.
func ParseCaps(names []string) (CapSet, error) {
	var s CapSet
	var bad []string
	all := SupportedCaps()
	for _, n := range names {
		name := strings.TrimPrefix(strings.ToLower(strings.TrimSpace(n)), "cap_")
		if name == "all" {
			s |= all
			continue
		}
		c, ok := capByName[name]
		if !ok || !all.Has(c) {
			bad = append(bad, name)
			continue
		}
		s |= 1 << c
	}
	if len(bad) > 0 {
		sort.Strings(bad)
		return 0, fmt.Errorf("%w: %s", ErrUnknownCap, strings.Join(bad, ", "))
	}
	return s, nil
}

// TaskCaps computes an isolated task's capabilities as Nomad's exec driver
// does: Nomad's defaults (DefaultCaps) that allow also lists, minus drop
// ("all" drops every one), plus add (add wins over drop). Every added
// capability must be in allow (ErrCapNotAllowed names the others). It
// returns the resulting bounding set and the added set, which a task
// running as a non-root user gets as ambient capabilities.
func TaskCaps(allow, add, drop []string) (bounding, added CapSet, err error) {
	allowed, err := ParseCaps(allow)
	if err != nil {
		return 0, 0, fmt.Errorf("allow_caps configured with %w", err)
	}
	added, err = ParseCaps(add)
	if err != nil {
		return 0, 0, fmt.Errorf("cap_add configured with %w", err)
	}
	dropped, err := ParseCaps(drop)
	if err != nil {
		return 0, 0, fmt.Errorf("cap_drop configured with %w", err)
	}
	if missing := added &^ allowed; missing != 0 {
		return 0, 0, fmt.Errorf("%w: %s", ErrCapNotAllowed, missing)
	}
	defaults, err := ParseCaps(DefaultCaps())
	if err != nil {
		return 0, 0, err
	}
	return defaults&allowed&^dropped | added, added, nil
}
