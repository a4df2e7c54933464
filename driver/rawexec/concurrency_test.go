package rawexec

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/meshlet/meshlet/driver"
	dt "github.com/meshlet/meshlet/driver/internal/drivertest"
)

// Tasks driven at once through every call that reads or changes the
// driver's task store; under go test -race this is the store's race test.
// Each task's two racing StartTasks start it once; it is then inspected,
// signalled, stopped, waited for and destroyed while another goroutine
// keeps inspecting every task.
func TestConcurrentTasks(t *testing.T) {
	d := newDriver(t, "")
	const n = 8
	cfgs := make([]*driver.TaskConfig, n)
	for i := range cfgs {
		cfgs[i] = dt.TaskConfig(t, fmt.Sprintf("c%d", i), "sleep", "30")
		id := cfgs[i].ID
		t.Cleanup(func() { _ = d.DestroyTask(id, true) })
	}
	stop := make(chan struct{})
	var reader sync.WaitGroup
	reader.Add(1)
	go func() {
		defer reader.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(time.Millisecond):
			}
			for _, c := range cfgs {
				_, _ = d.InspectTask(c.ID)
				_, _ = d.TaskStats(context.Background(), c.ID)
			}
		}
	}()
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for _, cfg := range cfgs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs <- driveTask(d, cfg)
		}()
	}
	wg.Wait()
	close(stop)
	reader.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
}

// driveTask runs one task through its life; it returns what went wrong.
func driveTask(d *Driver, cfg *driver.TaskConfig) error {
	var starts sync.WaitGroup
	startErrs := make([]error, 2)
	for i := range startErrs {
		starts.Add(1)
		go func() {
			defer starts.Done()
			_, startErrs[i] = d.StartTask(cfg)
		}()
	}
	starts.Wait()
	ok, dup := 0, 0
	for _, err := range startErrs {
		switch {
		case err == nil:
			ok++
		case errors.Is(err, driver.ErrTaskExists):
			dup++
		default:
			return fmt.Errorf("%s: StartTask: %w", cfg.ID, err)
		}
	}
	if ok != 1 || dup != 1 {
		return fmt.Errorf("%s: two racing StartTasks: %d started, %d refused; want 1 and 1", cfg.ID, ok, dup)
	}
	if st, err := d.InspectTask(cfg.ID); err != nil || st.State != driver.TaskStateRunning {
		return fmt.Errorf("%s: inspect a started task: %+v, %w", cfg.ID, st, err)
	}
	if err := d.SignalTask(cfg.ID, "SIGCONT"); err != nil {
		return fmt.Errorf("%s: SignalTask: %w", cfg.ID, err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), dt.Timeout)
	defer cancel()
	ch, err := d.WaitTask(ctx, cfg.ID)
	if err != nil {
		return fmt.Errorf("%s: WaitTask: %w", cfg.ID, err)
	}
	if err := d.StopTask(cfg.ID, dt.Timeout, ""); err != nil {
		return fmt.Errorf("%s: StopTask: %w", cfg.ID, err)
	}
	if res := <-ch; res == nil || res.Signal != 15 {
		return fmt.Errorf("%s: exit after StopTask = %+v; want killed by SIGTERM", cfg.ID, res)
	}
	if err := d.DestroyTask(cfg.ID, false); err != nil {
		return fmt.Errorf("%s: DestroyTask: %w", cfg.ID, err)
	}
	if _, err := d.InspectTask(cfg.ID); !errors.Is(err, driver.ErrTaskNotFound) {
		return fmt.Errorf("%s: inspect a destroyed task: %v; want ErrTaskNotFound", cfg.ID, err)
	}
	return nil
}
