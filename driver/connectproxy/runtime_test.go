package connectproxy

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/meshlet/meshlet/connect"
)

func TestValidateRuntimes(t *testing.T) {
	for _, tc := range []struct {
		order []string
		want  string // "" = valid
	}{
		{DefaultRuntimes, ""},
		{[]string{"builtin"}, ""},
		{[]string{"envoy", "docker"}, ""},
		{nil, "the list is empty"},
		{[]string{"docker", "podman"}, `unknown runtime "podman"`},
		{[]string{"docker", "envoy", "docker"}, `runtime "docker" is listed twice`},
	} {
		err := ValidateRuntimes(tc.order)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.order, err)
		case tc.want != "" && (!errors.Is(err, ErrInvalidRuntimes) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: error %v, want %q", tc.order, err, tc.want)
		}
	}
}

// The choice: the task's mode forces envoy or builtin; auto follows the
// node's order, skipping (with a reason) what the node cannot run.
func TestRuntimeChoice(t *testing.T) {
	noImage := errors.New("image envoyproxy/envoy:v1.34.1 is not present locally")
	noEnvoy := errors.New("no envoy binary on this node")
	for _, tc := range []struct {
		name        string
		mode        string
		order       []string
		unavailable map[string]error
		want        []string
		skipped     string
	}{
		{"all available: docker first", connect.SidecarAuto, DefaultRuntimes, nil, DefaultRuntimes, ""},
		{"no image: host envoy", "", DefaultRuntimes, map[string]error{RuntimeDocker: noImage},
			[]string{RuntimeEnvoy, RuntimeBuiltin}, "docker: " + noImage.Error()},
		{"neither: built-in", connect.SidecarAuto, DefaultRuntimes, map[string]error{RuntimeDocker: noImage, RuntimeEnvoy: noEnvoy},
			[]string{RuntimeBuiltin}, "docker: " + noImage.Error() + "|envoy: " + noEnvoy.Error()},
		{"configured order", connect.SidecarAuto, []string{RuntimeBuiltin, RuntimeDocker}, nil,
			[]string{RuntimeBuiltin, RuntimeDocker}, ""},
		{"none left", connect.SidecarAuto, []string{RuntimeDocker}, map[string]error{RuntimeDocker: noImage},
			nil, "docker: " + noImage.Error()},
		{"mode builtin forces it", connect.SidecarBuiltin, DefaultRuntimes, nil, []string{RuntimeBuiltin}, ""},
		{"mode envoy forces it", connect.SidecarEnvoy, []string{RuntimeDocker}, map[string]error{RuntimeEnvoy: noEnvoy},
			nil, "envoy: " + noEnvoy.Error()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			usable, skipped := candidates(taskOrder(tc.mode, tc.order), func(r string) error { return tc.unavailable[r] })
			if !slices.Equal(usable, tc.want) {
				t.Errorf("usable %v, want %v", usable, tc.want)
			}
			if got := strings.Join(skipped, "|"); got != tc.skipped {
				t.Errorf("skipped %q, want %q", got, tc.skipped)
			}
		})
	}
	err := noRuntimeError([]string{RuntimeDocker}, []string{"docker: " + noImage.Error()})
	if !errors.Is(err, ErrNoRuntime) || !strings.Contains(err.Error(), "tried docker: docker: image") {
		t.Errorf("no runtime error: %v", err)
	}
}

// firstRuntime: probes skip, a passing start error skips, any other start
// error stops the choice.
func TestFirstRuntime(t *testing.T) {
	errPull := errors.New("pull failed")
	errBroken := errors.New("broken")
	for _, tc := range []struct {
		name        string
		unavailable map[string]error
		startErr    map[string]error
		want        string
		wantErr     error
		skipped     string
	}{
		{"first", nil, nil, RuntimeDocker, nil, ""},
		{"probe skips", map[string]error{RuntimeDocker: errors.New("no image")}, nil, RuntimeEnvoy, nil, "docker: no image"},
		{"pull failure passes", nil, map[string]error{RuntimeDocker: errPull}, RuntimeEnvoy, nil, "docker: pull failed"},
		{"other error stops", nil, map[string]error{RuntimeDocker: errBroken}, "", errBroken, ""},
		{"none", map[string]error{RuntimeDocker: errors.New("a"), RuntimeEnvoy: errors.New("b")},
			map[string]error{RuntimeBuiltin: errPull}, "", nil, "docker: a|envoy: b|builtin: pull failed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var started []string
			r, v, skipped, err := firstRuntime(DefaultRuntimes, func(r string) error { return tc.unavailable[r] },
				func(r string) (string, error) {
					started = append(started, r)
					return "handle-" + r, tc.startErr[r]
				},
				func(_ string, err error) bool { return errors.Is(err, errPull) })
			if r != tc.want || !errors.Is(err, tc.wantErr) || (r != "" && v != "handle-"+r) {
				t.Errorf("got %q %q %v, want %q %v", r, v, err, tc.want, tc.wantErr)
			}
			if got := strings.Join(skipped, "|"); got != tc.skipped {
				t.Errorf("skipped %q, want %q", got, tc.skipped)
			}
			for _, s := range started {
				if tc.unavailable[s] != nil {
					t.Errorf("started %s, which the probe refused", s)
				}
			}
		})
	}
}
