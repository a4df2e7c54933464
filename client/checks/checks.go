// Package checks runs the health checks of an allocation's services on the
// client, the way Nomad's client and Consul's agent do: http, tcp, grpc
// (grpc.health.v1) and script checks, with Consul's status thresholds
// (success_before_passing, failures_before_critical, initial_status) and
// Nomad's check_restart.
//
// A Runner is started per allocation. Each check runs on its own goroutine;
// a run never overlaps the previous one of the same check. In bridge mode
// (Config.NetNS set) http, tcp and grpc checks connect from inside the
// allocation's network namespace, so a target of 127.0.0.1 is the
// allocation's loopback, not the host's. Script checks run inside the task
// through the driver (Config.Exec), whatever the network mode.
//
// Results are read with Runner.Results; Config.OnChange is told when a
// check's status or output changes. OnChange and Restarter.Restart are
// called from the check's goroutine: never concurrently for one check, but
// concurrently for different checks.
package checks

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
)

// Status is a check's state, with Consul's values.
type Status string

// Consul's check statuses.
const (
	StatusPassing  Status = "passing"
	StatusWarning  Status = "warning"
	StatusCritical Status = "critical"
)

// Check types.
const (
	TypeHTTP   = "http"
	TypeTCP    = "tcp"
	TypeGRPC   = "grpc"
	TypeScript = "script"
)

const (
	// DefaultInterval is used when a definition has no interval.
	DefaultInterval = 10 * time.Second
	// maxDefaultTimeout bounds the timeout given to a check without one.
	maxDefaultTimeout = 5 * time.Second
	// MaxOutput is how much of a response body or script output is kept.
	MaxOutput = 4 * 1024
)

// ErrInvalidCheck is wrapped by Definition.Validate's errors.
var ErrInvalidCheck = errors.New("invalid check")

// CheckRestart restarts a check's task after it has been unhealthy for
// Limit consecutive runs (Nomad's check_restart). A check without a task
// (a group service's check naming none) restarts the allocation's main
// tasks: Restarter.Restart is called with task "".
type CheckRestart struct {
	// Limit is the number of consecutive unhealthy results that restart
	// the task; 0 disables restarts.
	Limit int
	// Grace ignores results for this long after the runner starts and
	// after each restart of the task.
	Grace time.Duration
	// IgnoreWarnings counts warning as healthy.
	IgnoreWarnings bool
}

// Definition is one check, resolved to its target. The allocation runner
// builds it from a service's check block.
type Definition struct {
	// ID identifies the check in results; unique within a Runner.
	ID        string
	Name      string
	ServiceID string
	// Type is one of TypeHTTP, TypeTCP, TypeGRPC, TypeScript.
	Type string

	// Address and Port are the target of http, tcp and grpc checks. In
	// bridge mode: 127.0.0.1 or the allocation's address, and the port the
	// service listens on inside the namespace.
	Address string
	Port    int

	// HTTP: Path (may carry a query), Protocol "http" (default) or
	// "https", Method (default GET), Header (a "Host" entry sets the
	// request's host) and Body.
	Path     string
	Protocol string
	Method   string
	Header   map[string][]string
	Body     string

	// GRPCService is the service name asked of grpc.health.v1 ("" asks
	// for the server's overall health); GRPCUseTLS dials with TLS.
	GRPCService string
	GRPCUseTLS  bool
	// TLSSkipVerify skips certificate verification (https and grpc TLS).
	TLSSkipVerify bool
	// TLSServerName is the name sent in SNI and verified against the
	// server's certificate (https and grpc TLS); "" uses the address.
	TLSServerName string

	// Command and Args are a script check's command line, run in Task.
	Command string
	Args    []string
	// Task runs script checks and is restarted by CheckRestart ("" for
	// CheckRestart: the allocation's main tasks).
	Task string

	Interval time.Duration
	Timeout  time.Duration

	// SuccessBeforePassing and FailuresBeforeCritical are the numbers of
	// consecutive results needed to turn passing (or warning) and critical;
	// 0 means 1. FailuresBeforeWarning consecutive failures turn the check
	// warning until FailuresBeforeCritical is reached (Consul's
	// failures_before_warning); 0 means the same as FailuresBeforeCritical.
	SuccessBeforePassing   int
	FailuresBeforeCritical int
	FailuresBeforeWarning  int
	// InitialStatus is the status before the thresholds say otherwise;
	// "" means critical (see StartingStatus).
	InitialStatus Status

	CheckRestart *CheckRestart
}

// Validate reports what makes the definition impossible to run.
func (d Definition) Validate() error {
	var errs []error
	if d.ID == "" {
		errs = append(errs, errors.New("missing ID"))
	}
	switch d.Type {
	case TypeHTTP, TypeTCP, TypeGRPC:
		if d.Address == "" || d.Port <= 0 || d.Port > 65535 {
			errs = append(errs, fmt.Errorf("%s check needs an address and a port, got %q:%d", d.Type, d.Address, d.Port))
		}
	case TypeScript:
		if d.Command == "" {
			errs = append(errs, errors.New("script check needs a command"))
		}
		if d.Task == "" {
			errs = append(errs, errors.New("script check needs a task"))
		}
	default:
		errs = append(errs, fmt.Errorf("unsupported check type %q", d.Type))
	}
	if d.Type == TypeHTTP && d.Protocol != "" && d.Protocol != "http" && d.Protocol != "https" {
		errs = append(errs, fmt.Errorf("unsupported http protocol %q", d.Protocol))
	}
	switch d.InitialStatus {
	case "", StatusPassing, StatusWarning, StatusCritical:
	default:
		errs = append(errs, fmt.Errorf("unsupported initial status %q", d.InitialStatus))
	}
	if d.Interval < 0 || d.Timeout < 0 {
		errs = append(errs, errors.New("interval and timeout must not be negative"))
	}
	if d.SuccessBeforePassing < 0 || d.FailuresBeforeCritical < 0 || d.FailuresBeforeWarning < 0 {
		errs = append(errs, errors.New("thresholds must not be negative"))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w %q: %w", ErrInvalidCheck, d.Name, err)
	}
	return nil
}

func (d Definition) interval() time.Duration {
	if d.Interval <= 0 {
		return DefaultInterval
	}
	return d.Interval
}

// timeout is the definition's timeout, or min(interval, 5s).
func (d Definition) timeout() time.Duration {
	if d.Timeout > 0 {
		return d.Timeout
	}
	return min(d.interval(), maxDefaultTimeout)
}

// StartingStatus is the check's status before its first result counts:
// InitialStatus, or critical when that is unset.
func (d Definition) StartingStatus() Status {
	if d.InitialStatus == "" {
		return StatusCritical
	}
	return d.InitialStatus
}

// Result is a check's current state.
type Result struct {
	CheckID   string
	Name      string
	ServiceID string
	Status    Status
	Output    string
	// Timestamp is when the status was last set: at Start, then at every
	// run that passed the thresholds.
	Timestamp time.Time
}

// Execer runs a script check's command inside a task (the driver's exec).
type Execer interface {
	Exec(ctx context.Context, task string, cmd []string) (output []byte, exitCode int, err error)
}

// Restarter restarts a task for check_restart; task "" means every main
// task of the allocation (all but its connect sidecar proxies).
type Restarter interface {
	Restart(ctx context.Context, task, reason string) error
	// Started reports when task last started (for task "", the latest
	// start of the main tasks running) and whether it is running:
	// check_restart's grace runs from that start, and a check's results
	// do not count while its task is not running.
	Started(task string) (at time.Time, running bool)
}

// Config configures a Runner.
type Config struct {
	Logger hclog.Logger
	// NetNS is the path of the allocation's network namespace; "" dials
	// from the host.
	NetNS string
	// Exec runs script checks; without it they are critical.
	Exec Execer
	// Restarter is called by check_restart; without it restarts are off.
	Restarter Restarter
	// OnChange is called when a check's status or output changes.
	OnChange func(Result)
}
