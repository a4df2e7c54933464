package jobspecs

import (
	"fmt"
	"time"

	"github.com/meshlet/meshlet/structs"
)

// RestartMinInterval is the shortest restart interval, Nomad's
// RestartPolicyMinInterval.
const RestartMinInterval = 5 * time.Second

// checkRestart checks the fields of a restart block.
func checkRestart(rp *structs.RestartPolicy, p path, report reporter) {
	if rp == nil {
		return
	}
	if rp.Mode != nil && *rp.Mode != structs.RestartPolicyModeFail && *rp.Mode != structs.RestartPolicyModeDelay {
		report(SeverityError, p.attr("mode"), "Invalid restart mode",
			fmt.Sprintf("Restart mode %q is not valid; use \"fail\" or \"delay\".", *rp.Mode))
	}
	if rp.Attempts != nil && *rp.Attempts < 0 {
		report(SeverityError, p.attr("attempts"), "Invalid restart attempts", fmt.Sprintf("Attempts %d must not be negative.", *rp.Attempts))
	}
	if rp.Delay != nil && *rp.Delay < 0 {
		report(SeverityError, p.attr("delay"), "Invalid restart delay", fmt.Sprintf("Delay %s must not be negative.", *rp.Delay))
	}
	if rp.Interval != nil && *rp.Interval < 0 {
		report(SeverityError, p.attr("interval"), "Invalid restart interval", fmt.Sprintf("Interval %s must not be negative.", *rp.Interval))
	}
}

// restartFieldsValid reports whether rp's set fields pass checkRestart.
func restartFieldsValid(rp *structs.RestartPolicy) bool {
	if rp == nil {
		return true
	}
	neg := func(d *time.Duration) bool { return d != nil && *d < 0 }
	return (rp.Mode == nil || *rp.Mode == structs.RestartPolicyModeFail || *rp.Mode == structs.RestartPolicyModeDelay) &&
		(rp.Attempts == nil || *rp.Attempts >= 0) && !neg(rp.Delay) && !neg(rp.Interval)
}

// checkRestartPolicies applies Nomad's RestartPolicy.Validate rules to the
// group's policy in effect (its block over the job type's defaults), as
// Nomad's TaskGroup.Validate does; like Nomad, a task's own restart block
// is not held to them. Only a written block is checked (the defaults are
// valid), and not one whose fields checkRestart refuses already: each
// problem is reported once.
func checkRestartPolicies(jobType string, tg *structs.TaskGroup, p path, report reporter) {
	if tg.RestartPolicy == nil || !restartFieldsValid(tg.RestartPolicy) {
		return
	}
	eff := *tg.RestartPolicy
	base := defaultRestart(jobType)
	mergeRestart(&eff, &base)
	checkRestartRules(eff, p.sub("restart"), report)
}

// checkRestartRules applies Nomad's RestartPolicy.Validate rules to a
// complete policy: attempts = 0 with mode "delay" is ambiguous, the
// interval is at least RestartMinInterval, and attempts × delay fit in it.
// It reports whether rp passed.
func checkRestartRules(rp structs.RestartPolicy, p path, report reporter) bool {
	ok := true
	attempts, interval, delay, mode := *rp.Attempts, *rp.Interval, *rp.Delay, *rp.Mode
	if attempts == 0 && mode == structs.RestartPolicyModeDelay {
		report(SeverityError, p.attr("attempts"), "Ambiguous restart policy",
			"mode = \"delay\" with attempts = 0 is ambiguous; set attempts above 0, or mode = \"fail\" to fail at the first exit.")
		ok = false
	}
	if interval < RestartMinInterval {
		report(SeverityError, p.attr("interval"), "Invalid restart interval",
			fmt.Sprintf("Interval %s must be at least %s.", interval, RestartMinInterval))
		return false
	}
	// attempts × delay > interval, without overflowing.
	if delay > 0 && int64(attempts) > int64(interval/delay) {
		report(SeverityError, p.attr("interval"), "Restart attempts do not fit in interval", fmt.Sprintf(
			"%d attempts with delay %s cannot fit in interval %s; raise interval, or lower attempts or delay.",
			attempts, delay, interval))
		ok = false
	}
	return ok
}
