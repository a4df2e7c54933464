package envoy

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
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
func Args(configPath string, passthrough []string) []string {
	args := []string{"--config-path", configPath, "--disable-hot-restart"}
	return append(args, passthrough...)
}

// Exec replaces the current process with Envoy. The bootstrap is handed
// over in an anonymous in-memory file (/dev/fd/N), so no copy of it is left
// on disk. It only returns on error.
func Exec(binary string, bootstrap []byte, passthrough []string) error {
	fd, err := unix.MemfdCreate("envoy-bootstrap", 0) // no CLOEXEC: Envoy inherits it
	if err != nil {
		return fmt.Errorf("failed to create in-memory bootstrap file: %w", err)
	}
	f := os.NewFile(uintptr(fd), "envoy-bootstrap")
	if _, err := f.Write(bootstrap); err != nil {
		return fmt.Errorf("failed to write bootstrap: %w", err)
	}
	argv := append([]string{binary}, Args("/dev/fd/"+strconv.Itoa(fd), passthrough)...)
	if err := syscall.Exec(binary, argv, os.Environ()); err != nil {
		return fmt.Errorf("failed to exec %s: %w", binary, err)
	}
	return nil
}
