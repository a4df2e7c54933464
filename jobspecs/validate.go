package jobspecs

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/internal/versioncheck"
	"github.com/meshlet/meshlet/structs"
)

// ErrInvalidJob is wrapped by Validate's error.
var ErrInvalidJob = errors.New("invalid job")

// reporter receives one validation finding. at names the value (or the
// block) the finding is about.
type reporter func(sev Severity, at path, summary, detail string)

// Defaults of ValidateOptions.
const (
	// DefaultMaxCount bounds a group's count, and the sum of a job's
	// counts: meshlet places every allocation of a job in one plan, and
	// one node runs far fewer.
	DefaultMaxCount = 10_000
	// DefaultMaxJobBytes bounds a job's JSON encoding, the size it is
	// stored at (once per version).
	DefaultMaxJobBytes = 4 << 20
)

// ValidateOptions tunes Validate and Parse. A nil *ValidateOptions, or a
// zero field, means the default; a negative field means no limit.
type ValidateOptions struct {
	// MaxCount bounds each group's count and their sum over the job
	// (default DefaultMaxCount).
	MaxCount int
	// MaxJobBytes bounds the job's JSON encoding (default
	// DefaultMaxJobBytes).
	MaxJobBytes int
}

func (o *ValidateOptions) withDefaults() ValidateOptions {
	if o == nil {
		o = &ValidateOptions{}
	}
	return ValidateOptions{MaxCount: boundOr(o.MaxCount, DefaultMaxCount), MaxJobBytes: boundOr(o.MaxJobBytes, DefaultMaxJobBytes)}
}

// boundOr is v when positive, def when zero and no bound when negative.
func boundOr(v, def int) int {
	if v < 0 {
		return math.MaxInt
	}
	return positiveOr(v, def)
}

// Unbounded are ValidateOptions that check neither count nor size, for
// callers that leave them to the server's admission (server.Config's
// MaxJobCount and MaxJobSize, from the agent's job_max_count and
// job_max_size): the CLI, PUT /v1/jobs/parse and the agent's own
// validation.
func Unbounded() *ValidateOptions {
	return &ValidateOptions{MaxCount: -1, MaxJobBytes: -1}
}

// Validate checks a job with the default ValidateOptions; see
// ValidateWith.
func Validate(job *structs.Job) (warnings []string, err error) {
	return ValidateWith(job, nil)
}

// ValidateWith checks a job that did not come from HCL (JSON via the HTTP
// API) with the same rules as Parse. Problems carry a path instead of a position
// (`group "api": task "web": Missing driver; ...`). The error wraps
// ErrInvalidJob and lists every problem, one per line; warnings are
// returned separately. Validate neither needs nor applies Canonicalize:
// unset values that Canonicalize would fill are accepted.
func ValidateWith(job *structs.Job, opts *ValidateOptions) (warnings []string, err error) {
	if job == nil {
		return nil, fmt.Errorf("%w:\nmissing job", ErrInvalidJob)
	}
	var problems []string
	checkJob(job, opts.withDefaults(), func(sev Severity, at path, summary, detail string) {
		line := joinHuman(at.human, summary)
		if detail != "" {
			line += "; " + detail
		}
		line = oneLine(line)
		if sev == SeverityWarning {
			warnings = append(warnings, line)
		} else {
			problems = append(problems, line)
		}
	})
	if len(problems) > 0 {
		return warnings, fmt.Errorf("%w:\n%s", ErrInvalidJob, strings.Join(problems, "\n"))
	}
	return warnings, nil
}

// checkJob runs every rule over a job. It never mutates the job.
func checkJob(job *structs.Job, opts ValidateOptions, report reporter) {
	p := jobPath
	if job.ID == "" && job.Name == "" {
		report(SeverityError, p.attr("id"), "Missing job name", `A job needs a name: job "name" { ... }.`)
	}
	if checkName("Job ID", job.ID, p.attr("id"), report) && strings.ContainsAny(job.ID, " ") {
		report(SeverityError, p.attr("id"), "Invalid job ID", fmt.Sprintf("Job ID %q must not contain spaces or control characters.", job.ID))
	}
	if job.Name != job.ID {
		checkName("Job name", job.Name, p.attr("name"), report)
	}
	checkSize(job, opts, p, report)
	switch job.Type {
	case "", structs.JobTypeService, structs.JobTypeBatch:
	case structs.JobTypeSystem, structs.JobTypeSysBatch:
		checkSystemJob(job, p, report)
	default:
		report(SeverityError, p.attr("type"), "Invalid job type",
			fmt.Sprintf("Job type %q is not valid; use \"service\", \"batch\", \"system\" or \"sysbatch\".", job.Type))
	}
	if job.Priority != 0 && (job.Priority < 1 || job.Priority > 100) {
		report(SeverityError, p.attr("priority"), "Invalid priority", fmt.Sprintf("Priority %d is out of range 1-100.", job.Priority))
	}
	checkConstraints(job.Constraints, p, report)
	checkSpreads(job.Spreads, p, report)
	checkReschedule(job.Type, p.sub("reschedule"), report, job.Reschedule)
	if len(job.TaskGroups) == 0 {
		report(SeverityError, p, "Missing group", `A job needs at least one group "name" { ... } block.`)
	}
	seen := map[string]bool{}
	for i, tg := range job.TaskGroups {
		if tg == nil {
			report(SeverityError, p.item("group", i, ""), "Missing group", "The group is null.")
			continue
		}
		gp := p.item("group", i, tg.Name)
		switch {
		case tg.Name == "":
			report(SeverityError, gp, "Missing group name", "Every group needs a name.")
		case !checkName("Group name", tg.Name, gp, report):
		case seen[tg.Name]:
			report(SeverityError, gp, "Duplicate group name",
				fmt.Sprintf("Group name %q is used more than once; group names must be unique within a job.", tg.Name))
		}
		seen[tg.Name] = true
		checkGroup(tg, gp, opts, report)
		checkRestartPolicies(job.Type, tg, gp, report)
		checkReschedule(job.Type, gp.sub("reschedule"), report, tg.ReschedulePolicy, job.Reschedule)
	}
}

func checkGroup(tg *structs.TaskGroup, p path, opts ValidateOptions, report reporter) {
	if tg.Count < 0 {
		report(SeverityError, p.attr("count"), "Invalid count", fmt.Sprintf("Count %d must not be negative.", tg.Count))
	}
	if tg.Count > opts.MaxCount {
		report(SeverityError, p.attr("count"), "Invalid count", fmt.Sprintf("Count %d is over the limit of %d.", tg.Count, opts.MaxCount))
	}
	checkConstraints(tg.Constraints, p, report)
	checkSpreads(tg.Spreads, p, report)
	checkRestart(tg.RestartPolicy, p.sub("restart"), report)
	labels := checkNetworks(tg, p, report)
	if len(tg.Tasks) == 0 && !hasGateway(tg) {
		report(SeverityError, p, "Missing task",
			fmt.Sprintf("Group %q has no task; every group needs at least one task block.", tg.Name))
	}
	seen := map[string]bool{}
	for i, t := range tg.Tasks {
		if t == nil {
			report(SeverityError, p.item("task", i, ""), "Missing task", "The task is null.")
			continue
		}
		tp := p.item("task", i, t.Name)
		switch {
		case t.Name == "":
			report(SeverityError, tp, "Missing task name", "Every task needs a name.")
		case seen[t.Name]:
			report(SeverityError, tp, "Duplicate task name",
				fmt.Sprintf("Task name %q is used more than once in group %q; task names must be unique within a group.", t.Name, tg.Name))
		default:
			checkTaskName(t.Name, tp, report)
		}
		seen[t.Name] = true
		checkTask(t, tp, report)
		for j, s := range t.Services {
			sp := tp.item("service", j, serviceName(s))
			if s != nil && s.Connect != nil {
				report(SeverityError, sp.sub("connect"), "Connect on a task service",
					"connect is only allowed in group-level service blocks; move the service into the group.")
			}
			checkService(s, sp, tg, labels, report)
		}
	}
	for i, s := range tg.Services {
		checkService(s, p.item("service", i, serviceName(s)), tg, labels, report)
	}
	checkConnectNetwork(tg, p, report)
	checkGatewayNetwork(tg, p, report)
	checkUpstreamPorts(tg, p, report)
	checkExpose(tg, p, labels, report)
	checkConnectGroup(tg, p, report)
	checkDockerGroup(tg, p, report)
	checkProxyKinds(tg, p, report)
}

// checkProxyKinds refuses a task whose kind marks it as the proxy of a
// mesh service the group does not declare (or as a second proxy of one):
// a proxy task's kind is what the servers mint its service identity for.
func checkProxyKinds(tg *structs.TaskGroup, p path, report reporter) {
	proxies := map[*structs.Task]bool{}
	for _, s := range connect.MeshServices(tg) {
		proxies[connect.ProxyTaskFor(tg, s)] = true
	}
	for i, t := range tg.Tasks {
		if t == nil || proxies[t] {
			continue
		}
		svc, ok := connect.ProxyKindService(t.Kind)
		if !ok {
			continue
		}
		report(SeverityError, p.item("task", i, t.Name).attr("kind"), "Invalid task kind",
			fmt.Sprintf("Task %q has kind %q, but group %q has no connect service %q for it to be the proxy of (or another task already is); meshlet sets this kind on the proxy tasks it injects.", t.Name, t.Kind, tg.Name, svc))
	}
}

func serviceName(s *structs.Service) string {
	if s == nil {
		return ""
	}
	return s.Name
}

func checkTask(t *structs.Task, p path, report reporter) {
	switch t.Driver {
	case "":
		report(SeverityError, p.attr("driver"), "Missing driver",
			fmt.Sprintf("Task %q needs a driver, e.g. driver = \"raw_exec\".", t.Name))
	case "exec", "raw_exec", "docker", "connect_proxy": // connect_proxy runs connect sidecars; the driver checks its config
	default:
		report(SeverityWarning, p.attr("driver"), fmt.Sprintf("Driver %q is not built into meshlet", t.Driver),
			fmt.Sprintf("meshlet ships the exec, raw_exec and docker drivers; placement fails with \"driver %s not available on node\" unless a %s driver plugin is installed.", t.Driver, t.Driver))
	}
	if l := t.Lifecycle; l != nil {
		switch l.Hook {
		case structs.TaskLifecycleHookPrestart, structs.TaskLifecycleHookPoststart, structs.TaskLifecycleHookPoststop:
		default:
			report(SeverityError, p.sub("lifecycle").attr("hook"), "Invalid lifecycle hook",
				fmt.Sprintf("Hook %q is not valid; use \"prestart\", \"poststart\" or \"poststop\".", l.Hook))
		}
	}
	checkDriverConfig(t, p, report)
	checkRestart(t.RestartPolicy, p.sub("restart"), report)
	checkConstraints(t.Constraints, p, report)
	checkResources(t.Resources, p.sub("resources"), report)
	checkLogs(t.LogConfig, p.sub("logs"), report)
	checkArtifacts(t.Artifacts, p, report)
	checkTemplates(t.Templates, p, report)
}

// checkSize bounds the job's total count and its stored size.
func checkSize(job *structs.Job, opts ValidateOptions, p path, report reporter) {
	total := 0
	for _, tg := range job.TaskGroups {
		if tg != nil && tg.Count > 0 {
			total += min(tg.Count, opts.MaxCount+1)
		}
	}
	if total > opts.MaxCount && len(job.TaskGroups) > 1 {
		report(SeverityError, p, "Too many allocations",
			fmt.Sprintf("The groups' counts add up to more than %d allocations.", opts.MaxCount))
	}
	b, err := json.Marshal(job)
	if err != nil {
		report(SeverityError, p, "Invalid job", fmt.Sprintf("The job cannot be encoded: %v.", err))
		return
	}
	if len(b) > opts.MaxJobBytes {
		report(SeverityError, p, "Job too large",
			fmt.Sprintf("The job is %d bytes as JSON; the limit is %d bytes.", len(b), opts.MaxJobBytes))
	}
}

func checkResources(r *structs.Resources, p path, report reporter) {
	if r == nil {
		return
	}
	if r.CPU != nil && *r.CPU < 1 && (r.Cores == nil || *r.Cores == 0) {
		report(SeverityError, p.attr("cpu"), "Invalid cpu", fmt.Sprintf("cpu %d MHz must be at least 1.", *r.CPU))
	}
	if r.Cores != nil && *r.Cores != 0 && r.CPU != nil && *r.CPU != 0 {
		report(SeverityError, p.attr("cores"), "Conflicting cpu and cores", "Set either cpu (MHz) or cores, not both.")
	}
	if r.Cores != nil && *r.Cores < 0 {
		report(SeverityError, p.attr("cores"), "Invalid cores", fmt.Sprintf("cores %d must not be negative.", *r.Cores))
	}
	if r.MemoryMB != nil && *r.MemoryMB < 10 {
		report(SeverityError, p.attr("memory"), "Invalid memory", fmt.Sprintf("memory %d MB must be at least 10.", *r.MemoryMB))
	}
	if r.MemoryMaxMB != nil && *r.MemoryMaxMB != 0 && r.MemoryMB != nil && *r.MemoryMaxMB < *r.MemoryMB {
		report(SeverityError, p.attr("memory_max"), "Invalid memory_max",
			fmt.Sprintf("memory_max %d MB must be at least memory (%d MB).", *r.MemoryMaxMB, *r.MemoryMB))
	}
	if r.DiskMB != nil && *r.DiskMB < 0 {
		report(SeverityError, p.attr("disk"), "Invalid disk", fmt.Sprintf("disk %d MB must not be negative.", *r.DiskMB))
	}
}

func checkLogs(l *structs.LogConfig, p path, report reporter) {
	if l == nil {
		return
	}
	if l.MaxFiles != nil && *l.MaxFiles < 1 {
		report(SeverityError, p.attr("max_files"), "Invalid max_files", fmt.Sprintf("max_files %d must be at least 1.", *l.MaxFiles))
	}
	if l.MaxFileSizeMB != nil && *l.MaxFileSizeMB < 1 {
		report(SeverityError, p.attr("max_file_size"), "Invalid max_file_size",
			fmt.Sprintf("max_file_size %d MB must be at least 1.", *l.MaxFileSizeMB))
	}
}

var constraintOperators = []string{"=", "==", "is", "!=", "not", ">", ">=", "<", "<=", "distinct_hosts",
	"distinct_property", "regexp", "set_contains", "set_contains_all", "set_contains_any", "version",
	"semver", "is_set", "is_not_set"}

func checkConstraints(cs []*structs.Constraint, p path, report reporter) {
	for i, c := range cs {
		if c == nil {
			continue
		}
		cp := p.item("constraint", i, "")
		if !slices.Contains(constraintOperators, c.Operand) {
			report(SeverityError, cp.attr("operator"), "Invalid constraint operator",
				fmt.Sprintf("Operator %q is not valid; use one of %s.", c.Operand, strings.Join(constraintOperators, ", ")))
		}
		if c.LTarget == "" && c.Operand != "distinct_hosts" {
			report(SeverityError, cp.attr("attribute"), "Missing constraint attribute",
				fmt.Sprintf("Operator %q needs an attribute, e.g. attribute = \"${attr.kernel.name}\".", c.Operand))
		}
		// A value that interpolates is resolved, then checked, per node.
		if !strings.Contains(c.RTarget, "${") {
			if err := versioncheck.Validate(c.Operand, c.RTarget); err != nil {
				report(SeverityError, cp.attr("value"), "Invalid constraint value",
					fmt.Sprintf("Operator %q needs a valid value: %v.", c.Operand, err))
			}
		}
	}
}
