package api

import (
	"github.com/meshlet/meshlet/structs"
)

// Wire types in Nomad's /v1 shapes (the subset meshlet fills). Field names
// are what github.com/hashicorp/nomad/api decodes.

// JobRegisterRequest is the body of PUT /v1/jobs.
type JobRegisterRequest struct {
	Job *structs.Job
	RegisterOptions
}

// RegisterOptions are a registration's conditions, as Nomad's register
// request carries them: EnforceIndex registers only if the job's
// JobModifyIndex is JobModifyIndex, or, when that is 0, only a new job
// (`job run -check-index`); PreserveCounts keeps the counts of the groups
// the job already has (`job run -preserve-counts`).
type RegisterOptions struct {
	EnforceIndex   bool
	JobModifyIndex uint64
	PreserveCounts bool
}

// JobRegisterResponse answers a job registration.
type JobRegisterResponse struct {
	EvalID          string
	EvalCreateIndex uint64
	JobModifyIndex  uint64
	Warnings        string
	Index           uint64
	KnownLeader     bool
	LastContact     int64
}

// JobDeregisterResponse answers DELETE /v1/job/:id.
type JobDeregisterResponse struct {
	EvalID          string
	EvalCreateIndex uint64
	JobModifyIndex  uint64
	Index           uint64
}

// JobsParseRequest is the body of PUT /v1/jobs/parse.
type JobsParseRequest struct {
	JobHCL       string
	Variables    string
	Canonicalize bool
}

// TaskGroupSummary counts a group's allocations by client status.
type TaskGroupSummary struct {
	Queued   int
	Complete int
	Failed   int
	Running  int
	Starting int
	Lost     int
	Unknown  int
}

// JobSummary summarizes a job's allocations per task group.
type JobSummary struct {
	JobID       string
	Namespace   string
	Summary     map[string]TaskGroupSummary
	CreateIndex uint64
	ModifyIndex uint64
}

// JobListStub is a job in GET /v1/jobs.
type JobListStub struct {
	ID                string
	ParentID          string
	Name              string
	Namespace         string `json:",omitempty"`
	Datacenters       []string
	Type              string
	Priority          int
	Periodic          bool
	ParameterizedJob  bool
	Stop              bool
	Status            string
	StatusDescription string
	JobSummary        *JobSummary
	CreateIndex       uint64
	ModifyIndex       uint64
	JobModifyIndex    uint64
	SubmitTime        int64
	Meta              map[string]string `json:",omitempty"`
}

// AllocListStub is an allocation in list endpoints.
type AllocListStub struct {
	ID                 string
	EvalID             string
	Name               string
	Namespace          string
	NodeID             string
	NodeName           string
	JobID              string
	JobType            string
	JobVersion         uint64
	TaskGroup          string
	AllocatedResources *structs.AllocatedResources `json:",omitempty"`
	DesiredStatus      string
	DesiredDescription string
	ClientStatus       string
	ClientDescription  string
	TaskStates         map[string]*structs.TaskState
	FollowupEvalID     string
	NextAllocation     string
	RescheduleTracker  *structs.RescheduleTracker `json:",omitempty"`
	CreateIndex        uint64
	ModifyIndex        uint64
	CreateTime         int64
	ModifyTime         int64
}

// NodeListStub is a node in GET /v1/nodes.
type NodeListStub struct {
	Address               string
	ID                    string
	Attributes            map[string]string `json:",omitempty"`
	Datacenter            string
	Name                  string
	NodeClass             string
	NodePool              string
	Version               string
	Drain                 bool
	SchedulingEligibility string
	Status                string
	StatusDescription     string
	Drivers               map[string]*structs.DriverInfo
	CreateIndex           uint64
	ModifyIndex           uint64
}

// StreamFrame is one frame of a log stream (Data is base64 in JSON).
type StreamFrame struct {
	Offset    int64  `json:",omitempty"`
	Data      []byte `json:",omitempty"`
	File      string `json:",omitempty"`
	FileEvent string `json:",omitempty"`
}

// NewAllocListStub converts an allocation to its list shape.
func NewAllocListStub(a *structs.Allocation) *AllocListStub {
	s := &AllocListStub{
		ID:                 a.ID,
		EvalID:             a.EvalID,
		Name:               a.Name,
		Namespace:          a.Namespace,
		NodeID:             a.NodeID,
		NodeName:           a.NodeName,
		JobID:              a.JobID,
		TaskGroup:          a.TaskGroup,
		AllocatedResources: a.AllocatedResources,
		DesiredStatus:      a.DesiredStatus,
		DesiredDescription: a.DesiredDescription,
		ClientStatus:       a.ClientStatus,
		ClientDescription:  a.ClientDescription,
		TaskStates:         a.TaskStates,
		NextAllocation:     a.NextAllocation,
		FollowupEvalID:     a.FollowupEvalID,
		RescheduleTracker:  a.RescheduleTracker,
		CreateIndex:        a.CreateIndex,
		ModifyIndex:        a.ModifyIndex,
		CreateTime:         a.CreateTime,
		ModifyTime:         a.ModifyTime,
	}
	if a.Job != nil {
		s.JobType = a.Job.Type
		s.JobVersion = a.Job.Version
	}
	return s
}

// NewJobSummary counts allocs (of job) per task group. Queued is what a
// running job still lacks to reach each group's count.
func NewJobSummary(job *structs.Job, allocs []*structs.Allocation) *JobSummary {
	sum := &JobSummary{
		JobID:       job.ID,
		Namespace:   job.Namespace,
		Summary:     make(map[string]TaskGroupSummary, len(job.TaskGroups)),
		CreateIndex: job.CreateIndex,
		ModifyIndex: job.ModifyIndex,
	}
	live := make(map[string]int)
	for _, tg := range job.TaskGroups {
		sum.Summary[tg.Name] = TaskGroupSummary{}
	}
	for _, a := range allocs {
		if a.JobID != job.ID {
			continue
		}
		tg := sum.Summary[a.TaskGroup]
		switch a.ClientStatus {
		case structs.AllocClientStatusPending:
			tg.Starting++
		case structs.AllocClientStatusRunning:
			tg.Running++
		case structs.AllocClientStatusComplete:
			tg.Complete++
		case structs.AllocClientStatusFailed:
			tg.Failed++
		case structs.AllocClientStatusLost:
			tg.Lost++
		default:
			tg.Unknown++
		}
		sum.Summary[a.TaskGroup] = tg
		if a.DesiredStatus == structs.AllocDesiredStatusRun {
			live[a.TaskGroup]++
		}
	}
	if !job.Stop {
		for _, g := range job.TaskGroups {
			if q := g.Count - live[g.Name]; q > 0 {
				tg := sum.Summary[g.Name]
				tg.Queued = q
				sum.Summary[g.Name] = tg
			}
		}
	}
	return sum
}

// newJobListStub converts a job to its list shape.
func newJobListStub(j *structs.Job, allocs []*structs.Allocation) *JobListStub {
	return &JobListStub{
		ID:             j.ID,
		Name:           j.Name,
		Namespace:      j.Namespace,
		Datacenters:    j.Datacenters,
		Type:           j.Type,
		Priority:       j.Priority,
		Stop:           j.Stop,
		Status:         j.Status,
		JobSummary:     NewJobSummary(j, allocs),
		CreateIndex:    j.CreateIndex,
		ModifyIndex:    j.ModifyIndex,
		JobModifyIndex: j.JobModifyIndex,
		SubmitTime:     j.SubmitTime,
		Meta:           j.Meta,
	}
}

// newNodeListStub converts a node to its list shape.
func newNodeListStub(n *structs.Node, version string) *NodeListStub {
	addr := n.HTTPAddr
	return &NodeListStub{
		Address:               hostOnly(addr),
		ID:                    n.ID,
		Attributes:            n.Attributes,
		Datacenter:            n.Datacenter,
		Name:                  n.Name,
		NodePool:              defaultNodePool,
		Version:               version,
		Drain:                 n.Draining(),
		SchedulingEligibility: eligibility(n),
		Status:                n.Status,
		Drivers:               n.Drivers,
		CreateIndex:           n.CreateIndex,
		ModifyIndex:           n.ModifyIndex,
	}
}

// eligibility is the node's scheduling eligibility ("" is eligible).
func eligibility(n *structs.Node) string {
	if n.Eligible() {
		return structs.NodeSchedulingEligible
	}
	return structs.NodeSchedulingIneligible
}
