package connect

import (
	"slices"
	"strings"
	"testing"
)

// TestEnvoyArgsExtraOverridesDefaults: Envoy refuses an option given twice
// ("Argument already set!", -l and --log-level being one option), so a
// task's envoy_args that set the log level, the concurrency or
// --disable-hot-restart replace the defaults instead of repeating them.
func TestEnvoyArgsExtraOverridesDefaults(t *testing.T) {
	tests := []struct {
		extra []string
		want  string
	}{
		{nil, "-c /b.json -l info --concurrency 1 --disable-hot-restart"},
		{[]string{"--component-log-level", "upstream:debug"},
			"-c /b.json -l info --concurrency 1 --disable-hot-restart --component-log-level upstream:debug"},
		{[]string{"-l", "debug"}, "-c /b.json --concurrency 1 --disable-hot-restart -l debug"},
		{[]string{"--log-level", "trace"}, "-c /b.json --concurrency 1 --disable-hot-restart --log-level trace"},
		{[]string{"--concurrency", "4"}, "-c /b.json -l info --disable-hot-restart --concurrency 4"},
		{[]string{"--disable-hot-restart", "-l debug"}, "-c /b.json --concurrency 1 --disable-hot-restart -l debug"},
	}
	for _, tc := range tests {
		got := EnvoyArgs("/b.json", tc.extra...)
		if strings.Join(got, " ") != tc.want {
			t.Errorf("EnvoyArgs(%q) = %q, want %q", tc.extra, got, tc.want)
		}
		seen := map[string]bool{}
		for _, a := range got {
			f, _, _ := strings.Cut(a, " ")
			if f == "--log-level" {
				f = "-l"
			}
			if strings.HasPrefix(f, "-") && seen[f] {
				t.Errorf("EnvoyArgs(%q) repeats %s: %q", tc.extra, f, got)
			}
			seen[f] = true
		}
	}
	cfg := DockerSidecarConfig("img", "/secrets/b.json", []string{"--concurrency", "2"})
	args := cfg["args"].([]any)
	if n := slices.Index(args, any("--concurrency")); n < 0 || slices.Index(args[n+1:], any("--concurrency")) >= 0 {
		t.Errorf("docker sidecar args = %v, want one --concurrency", args)
	}
}
