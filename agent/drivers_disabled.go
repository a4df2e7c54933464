package agent

import (
	"context"
	"errors"
	"fmt"

	"github.com/meshlet/meshlet/driver"
)

// ErrDriverDisabled is returned when a task would start on a driver the
// agent's configuration disables.
var ErrDriverDisabled = errors.New("driver disabled")

// disabledDriver is a built-in driver the configuration turns off, as
// Nomad's raw_exec without enabled = true: it fingerprints as undetected
// ("disabled"), so the scheduler places nothing needing it on this node,
// and refuses to start tasks. Tasks it started before it was disabled can
// still be recovered, stopped and destroyed.
type disabledDriver struct {
	driver.Driver
	hint string
}

// disabledHealth is the driver's health description on the node.
func (d disabledDriver) disabledHealth() string {
	return "disabled; enable it with " + d.hint
}

func (d disabledDriver) Fingerprint(context.Context) (*driver.Fingerprint, error) {
	return &driver.Fingerprint{HealthDescription: d.disabledHealth()}, nil
}

func (d disabledDriver) StartTask(*driver.TaskConfig) (*driver.TaskHandle, error) {
	return nil, fmt.Errorf("%w: %s is %s", ErrDriverDisabled, d.Name(), d.disabledHealth())
}
