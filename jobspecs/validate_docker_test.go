package jobspecs

import (
	"slices"
	"testing"

	"github.com/meshlet/meshlet/driver/docker"
)

// The keys checked at submit are the keys the driver reads.
func TestDockerConfigKeysMatchDriver(t *testing.T) {
	if !slices.Equal(dockerConfigKeys, docker.TaskKeys) {
		t.Errorf("jobspecs docker keys %v, driver's %v", dockerConfigKeys, docker.TaskKeys)
	}
	for _, k := range dockerConfigUnsupported {
		if slices.Contains(docker.TaskKeys, k) {
			t.Errorf("%s is both supported and unsupported", k)
		}
	}
}
