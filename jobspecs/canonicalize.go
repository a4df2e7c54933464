package jobspecs

import (
	"slices"
	"strings"
	"time"

	"github.com/meshlet/meshlet/structs"
)

// Defaults Canonicalize fills, as in Nomad.
const (
	DefaultRegion              = "global"
	DefaultNamespace           = "default"
	DefaultDatacenter          = "*"
	DefaultPriority            = 50
	DefaultKillTimeout         = 5 * time.Second
	DefaultLogMaxFiles         = 10
	DefaultLogMaxFileSize      = 10 // MB
	DefaultCPU                 = 100
	DefaultMemoryMB            = 300
	DefaultAddressMode         = "auto"
	DefaultLocalServiceAddress = "127.0.0.1"
	// DefaultCheckRestartGrace is a check_restart's grace when it sets
	// none, as Nomad's.
	DefaultCheckRestartGrace = time.Second
)

// defaultRestart returns Nomad's restart policy for a job type: batch and
// sysbatch jobs (which run to completion) get the batch defaults.
func defaultRestart(jobType string) structs.RestartPolicy {
	attempts, interval := 2, 30*time.Minute
	if jobType == structs.JobTypeBatch || jobType == structs.JobTypeSysBatch {
		attempts, interval = 3, 24*time.Hour
	}
	return structs.RestartPolicy{Attempts: &attempts, Interval: &interval, Delay: ptr(15 * time.Second), Mode: ptr(structs.RestartPolicyModeFail)}
}

// Canonicalize fills Nomad's defaults in place: job type, region,
// namespace, datacenters, ID/Name, priority; group restart policy (by job
// type; tasks inherit the group's), group reschedule policy (the job's
// reschedule block merged in, then the job type's defaults), job update
// settings into groups;
// network mode; service address mode, name and proxy local address; task
// kill timeout, log limits and resources. It only fills what is unset, so it
// is idempotent. It leaves a group's count alone: the HCL and JSON decoders
// default an unset count to 1, and an explicit 0 (scale the group to zero)
// stays 0.
func Canonicalize(job *structs.Job) {
	if job == nil {
		return
	}
	if job.ID == "" {
		job.ID = job.Name
	}
	if job.Name == "" {
		job.Name = job.ID
	}
	setDefault(&job.Type, structs.JobTypeService)
	setDefault(&job.Region, DefaultRegion)
	setDefault(&job.Namespace, DefaultNamespace)
	if len(job.Datacenters) == 0 {
		job.Datacenters = []string{DefaultDatacenter}
	}
	if job.Priority == 0 {
		job.Priority = DefaultPriority
	}
	canonicalizeConstraints(job.Constraints)
	canonicalizeSpreads(job.Spreads)
	interpolateConnectNames(job)
	for _, tg := range job.TaskGroups {
		if tg != nil {
			canonicalizeGroup(job, tg)
		}
	}
}

func canonicalizeGroup(job *structs.Job, tg *structs.TaskGroup) {
	// Count is not defaulted here: the HCL decoder and TaskGroup's JSON
	// decoding default an unset count to 1, so an explicit 0 stays 0.
	canonicalizeConstraints(tg.Constraints)
	canonicalizeSpreads(tg.Spreads)
	def := defaultRestart(job.Type)
	if tg.RestartPolicy == nil {
		tg.RestartPolicy = &structs.RestartPolicy{}
	}
	mergeRestart(tg.RestartPolicy, &def)
	canonicalizeReschedule(job, tg)
	if job.Update != nil {
		if tg.Update == nil {
			tg.Update = &structs.UpdateStrategy{}
		}
		mergeUpdate(tg.Update, job.Update)
	}
	for _, n := range tg.Networks {
		if n != nil {
			setDefault(&n.Mode, structs.NetworkModeHost)
		}
	}
	for _, s := range tg.Services {
		canonicalizeService(s, job.Name+"-"+tg.Name)
	}
	for _, t := range tg.Tasks {
		if t != nil {
			canonicalizeTask(t, tg, job.Name+"-"+tg.Name+"-"+t.Name)
		}
	}
}

func canonicalizeTask(t *structs.Task, tg *structs.TaskGroup, serviceName string) {
	canonicalizeConstraints(t.Constraints)
	if t.KillTimeout == nil {
		t.KillTimeout = ptr(DefaultKillTimeout)
	}
	if t.LogConfig == nil {
		t.LogConfig = &structs.LogConfig{}
	}
	fillPtr(&t.LogConfig.MaxFiles, DefaultLogMaxFiles)
	fillPtr(&t.LogConfig.MaxFileSizeMB, DefaultLogMaxFileSize)
	fillPtr(&t.LogConfig.Disabled, false)
	if t.RestartPolicy == nil {
		t.RestartPolicy = &structs.RestartPolicy{}
	}
	mergeRestart(t.RestartPolicy, tg.RestartPolicy)
	if t.Resources == nil {
		t.Resources = &structs.Resources{}
	}
	if t.Resources.Cores == nil || *t.Resources.Cores == 0 {
		fillPtr(&t.Resources.CPU, DefaultCPU)
	}
	fillPtr(&t.Resources.MemoryMB, DefaultMemoryMB)
	for _, s := range t.Services {
		canonicalizeService(s, serviceName)
	}
	for _, tmpl := range t.Templates {
		canonicalizeTemplate(tmpl)
	}
}

// Template defaults, as in Nomad.
const (
	DefaultTemplateSplay = 5 * time.Second
	DefaultTemplatePerms = "0644"
)

func canonicalizeTemplate(t *structs.Template) {
	if t == nil {
		return
	}
	fillPtr(&t.ChangeMode, structs.TemplateChangeModeRestart)
	fillPtr(&t.Splay, DefaultTemplateSplay)
	fillPtr(&t.Perms, DefaultTemplatePerms)
	fillPtr(&t.LeftDelim, "{{")
	fillPtr(&t.RightDelim, "}}")
	fillPtr(&t.Envvars, false)
	fillPtr(&t.ErrMissingKey, false)
}

func canonicalizeService(s *structs.Service, defaultName string) {
	if s == nil {
		return
	}
	setDefault(&s.Name, defaultName)
	setDefault(&s.AddressMode, DefaultAddressMode)
	for i := range s.Checks {
		if s.CheckRestart != nil { // a JSON job's service-level block
			s.Checks[i].CheckRestart = s.CheckRestart.Merge(s.Checks[i].CheckRestart)
		}
		if cr := s.Checks[i].CheckRestart; cr != nil {
			fillPtr(&cr.Grace, DefaultCheckRestartGrace)
		}
	}
	s.CheckRestart = nil
	canonicalizeIngress(s.Connect)
	if s.Connect == nil || s.Connect.SidecarService == nil {
		return
	}
	if s.Connect.SidecarService.Proxy == nil {
		s.Connect.SidecarService.Proxy = &structs.ConsulProxy{}
	}
	setDefault(&s.Connect.SidecarService.Proxy.LocalServiceAddress, DefaultLocalServiceAddress)
}

// canonicalizeConstraints defaults an empty operator to "=".
func canonicalizeConstraints(cs []*structs.Constraint) {
	for _, c := range cs {
		if c != nil {
			setDefault(&c.Operand, "=")
		}
	}
}

// DefaultSpreadWeight is the weight of a spread block that sets none, as
// Nomad's.
const DefaultSpreadWeight = 50

// canonicalizeSpreads defaults an unset spread weight.
func canonicalizeSpreads(ss []*structs.Spread) {
	for _, s := range ss {
		if s != nil {
			fillPtr(&s.Weight, DefaultSpreadWeight)
		}
	}
}

func mergeRestart(dst, src *structs.RestartPolicy) {
	if src == nil {
		return
	}
	fillFrom(&dst.Attempts, src.Attempts)
	fillFrom(&dst.Interval, src.Interval)
	fillFrom(&dst.Delay, src.Delay)
	fillFrom(&dst.Mode, src.Mode)
}

func mergeUpdate(dst, src *structs.UpdateStrategy) {
	fillFrom(&dst.Stagger, src.Stagger)
	fillFrom(&dst.MaxParallel, src.MaxParallel)
	fillFrom(&dst.HealthCheck, src.HealthCheck)
	fillFrom(&dst.MinHealthyTime, src.MinHealthyTime)
	fillFrom(&dst.HealthyDeadline, src.HealthyDeadline)
	fillFrom(&dst.ProgressDeadline, src.ProgressDeadline)
	fillFrom(&dst.Canary, src.Canary)
	fillFrom(&dst.AutoRevert, src.AutoRevert)
}

func ptr[T any](v T) *T { return &v }

func setDefault(dst *string, v string) {
	if *dst == "" {
		*dst = v
	}
}

func fillPtr[T any](dst **T, v T) {
	if *dst == nil {
		*dst = &v
	}
}

// fillFrom copies *src into a fresh pointer when dst is unset, so that the
// two never alias.
func fillFrom[T any](dst **T, src *T) {
	if *dst == nil && src != nil {
		v := *src
		*dst = &v
	}
}

// interpolateConnectNames substitutes job-level values into the names of
// the job's connect services (interpolateJobLevel). Parse does it before
// validating, Canonicalize (the servers' path) again: it is idempotent.
func interpolateConnectNames(job *structs.Job) {
	for _, tg := range job.TaskGroups {
		if tg == nil {
			continue
		}
		for _, s := range tg.Services {
			if s != nil && s.Connect != nil {
				s.Name = interpolateJobLevel(s.Name, job, tg)
			}
		}
	}
}

// interpolateJobLevel substitutes in a connect service's name the values
// known when the job is registered, as Nomad does before it checks the
// name: NOMAD_JOB_ID, NOMAD_JOB_NAME, NOMAD_NAMESPACE, NOMAD_REGION,
// NOMAD_GROUP_NAME and NOMAD_META_<key> (the group's meta over the
// job's). Other references (node or allocation values) stay as written.
func interpolateJobLevel(name string, job *structs.Job, tg *structs.TaskGroup) string {
	if !strings.Contains(name, "${") {
		return name
	}
	or := func(v, def string) string {
		if v == "" {
			return def
		}
		return v
	}
	vals := map[string]string{
		"NOMAD_JOB_ID": or(job.ID, job.Name), "NOMAD_JOB_NAME": or(job.Name, job.ID),
		"NOMAD_NAMESPACE": or(job.Namespace, DefaultNamespace), "NOMAD_REGION": or(job.Region, DefaultRegion),
		"NOMAD_GROUP_NAME": tg.Name,
	}
	for _, meta := range []map[string]string{job.Meta, tg.Meta} {
		for k, v := range meta {
			vals["NOMAD_META_"+k] = v
		}
	}
	var b strings.Builder
	for {
		i := strings.Index(name, "${")
		if i < 0 {
			break
		}
		j := strings.Index(name[i:], "}")
		if j < 0 {
			break
		}
		ref := strings.TrimSpace(name[i+2 : i+j])
		b.WriteString(name[:i])
		if v, ok := vals[ref]; ok {
			b.WriteString(v)
		} else {
			b.WriteString(name[i : i+j+1])
		}
		name = name[i+j+1:]
	}
	b.WriteString(name)
	return b.String()
}

// ServiceNames are the names job's services register under once the job
// is canonicalized (an unnamed service gets "<job>-<group>" or
// "<job>-<group>-<task>", a connect name its job-level values), sorted
// and without duplicates; job is not changed.
func ServiceNames(job *structs.Job) []string {
	jobName := job.Name
	if jobName == "" {
		jobName = job.ID
	}
	name := func(s *structs.Service, tg *structs.TaskGroup, def string) string {
		n := s.Name
		if n == "" {
			n = def
		}
		if s.Connect != nil {
			n = interpolateJobLevel(n, job, tg)
		}
		return n
	}
	var out []string
	for _, tg := range job.TaskGroups {
		if tg == nil {
			continue
		}
		for _, s := range tg.Services {
			if s != nil {
				out = append(out, name(s, tg, jobName+"-"+tg.Name))
			}
		}
		for _, t := range tg.Tasks {
			for _, s := range taskServices(t) {
				out = append(out, name(s, tg, jobName+"-"+tg.Name+"-"+t.Name))
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}

func taskServices(t *structs.Task) []*structs.Service {
	if t == nil {
		return nil
	}
	var out []*structs.Service
	for _, s := range t.Services {
		if s != nil {
			out = append(out, s)
		}
	}
	return out
}
