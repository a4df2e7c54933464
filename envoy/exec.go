package envoy

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// ErrEnvoyNotFound is returned when no envoy binary is available.
var ErrEnvoyNotFound = errors.New("envoy binary not found")

// FindBinary returns explicit if set and executable, else envoy from PATH.
func FindBinary(explicit string) (string, error) {
	if explicit != "" {
		st, err := os.Stat(explicit)
		if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			return "", fmt.Errorf("%w: %s is not an executable file", ErrEnvoyNotFound, explicit)
		}
		return explicit, nil
	}
	p, err := exec.LookPath("envoy")
	if err != nil {
		return "", fmt.Errorf("%w: not in PATH; install Envoy or use the built-in proxy", ErrEnvoyNotFound)
	}
	return p, nil
}

// Args returns Envoy's command line for a bootstrap at configPath, followed
// by the caller's pass-through args (as `consul connect envoy -- ARGS`).
// Hot restart is disabled unless the pass-through args configure it or
// disable it themselves (Envoy refuses an option given twice).
func Args(configPath string, passthrough []string) []string {
	args := []string{"--config-path", configPath}
	if !touchesHotRestart(passthrough) {
		args = append(args, "--disable-hot-restart")
	}
	return append(args, passthrough...)
}

// hotRestartFlags are Envoy's options about hot restart.
var hotRestartFlags = []string{"--disable-hot-restart", "--restart-epoch", "--hot-restart-version", "--drain-time-s", "--parent-shutdown-time-s"}

// touchesHotRestart reports whether args give one of hotRestartFlags,
// alone or with its value in the same argument.
func touchesHotRestart(args []string) bool {
	for _, a := range args {
		for _, f := range hotRestartFlags {
			if a == f || strings.HasPrefix(a, f+" ") || strings.HasPrefix(a, f+"=") {
				return true
			}
		}
	}
	return false
}

// Exec replaces the current process with Envoy. The bootstrap is handed
// over in an anonymous in-memory file (/dev/fd/N, see MemFile), so no copy
// of it is left on disk. It only returns on error.
func Exec(binary string, bootstrap []byte, passthrough []string) error {
	path, err := MemFile(bootstrap)
	if err != nil {
		return err
	}
	argv := append([]string{binary}, Args(path, passthrough)...)
	if err := syscall.Exec(binary, argv, os.Environ()); err != nil {
		return fmt.Errorf("failed to exec %s: %w", binary, err)
	}
	return nil
}

// MemFile puts a bootstrap in a sealed anonymous in-memory file that the
// programs this process executes inherit, and returns its path,
// "/dev/fd/N". Any user can open it there (a memfd's mode is 0777), so a
// process that drops privileges before executing Envoy still hands it a
// bootstrap only root could read; the seals keep it from being changed.
func MemFile(data []byte) (string, error) {
	// No MFD_CLOEXEC: Envoy inherits it.
	fd, err := unix.MemfdCreate("envoy-bootstrap", unix.MFD_ALLOW_SEALING)
	if err != nil {
		return "", fmt.Errorf("failed to create in-memory bootstrap file: %w", err)
	}
	// The raw fd is written directly: an *os.File would close it when
	// collected, before the exec.
	for rest := data; len(rest) > 0; {
		n, err := unix.Write(fd, rest)
		if err != nil {
			_ = unix.Close(fd)
			return "", fmt.Errorf("failed to write bootstrap: %w", err)
		}
		rest = rest[n:]
	}
	seals := unix.F_SEAL_SEAL | unix.F_SEAL_SHRINK | unix.F_SEAL_GROW | unix.F_SEAL_WRITE
	if _, err := unix.FcntlInt(uintptr(fd), unix.F_ADD_SEALS, seals); err != nil {
		_ = unix.Close(fd)
		return "", fmt.Errorf("failed to seal in-memory bootstrap file: %w", err)
	}
	return "/dev/fd/" + strconv.Itoa(fd), nil
}
