package agent

import (
	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/driver"
	"github.com/meshlet/meshlet/driver/plugin"
)

// loadPlugins launches the external driver plugins in dir (none when dir
// is empty) and returns them with a cleanup that stops the plugin
// processes; tasks they started keep running under their executors.
func loadPlugins(dir string, logger hclog.Logger) ([]driver.Driver, func(), error) {
	if dir == "" {
		return nil, nil, nil
	}
	drivers, cleanup, err := plugin.Load(dir, logger)
	if err != nil {
		return nil, nil, err
	}
	for _, d := range drivers {
		logger.Info("loaded driver plugin", "driver", d.Name(), "path", dir)
	}
	return drivers, cleanup, nil
}
