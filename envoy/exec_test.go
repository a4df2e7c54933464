package envoy

import (
	"strings"
	"testing"
)

// TestArgsPassThroughHotRestart: as `consul connect envoy`, hot restart is
// disabled unless the pass-through args configure it (--restart-epoch...),
// and never twice (Envoy refuses an option given twice).
func TestArgsPassThroughHotRestart(t *testing.T) {
	tests := []struct {
		pass []string
		want string
	}{
		{nil, "--config-path /dev/fd/3 --disable-hot-restart"},
		{[]string{"-l", "debug"}, "--config-path /dev/fd/3 --disable-hot-restart -l debug"},
		{[]string{"--disable-hot-restart", "-l", "debug"}, "--config-path /dev/fd/3 --disable-hot-restart -l debug"},
		{[]string{"--restart-epoch", "1"}, "--config-path /dev/fd/3 --restart-epoch 1"},
		{[]string{"--drain-time-s", "5", "--parent-shutdown-time-s", "10"}, "--config-path /dev/fd/3 --drain-time-s 5 --parent-shutdown-time-s 10"},
		{[]string{"--hot-restart-version"}, "--config-path /dev/fd/3 --hot-restart-version"},
	}
	for _, tc := range tests {
		if got := strings.Join(Args("/dev/fd/3", tc.pass), " "); got != tc.want {
			t.Errorf("Args(%q) = %q, want %q", tc.pass, got, tc.want)
		}
	}
}
