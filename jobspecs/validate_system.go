package jobspecs

import (
	"fmt"

	"github.com/meshlet/meshlet/structs"
)

// checkSystemJob applies Nomad's rules for system and sysbatch jobs: one
// allocation per node, so no count above 1, and no reschedule, spread or
// (system) affinity, which placement by count would need.
func checkSystemJob(job *structs.Job, p path, report reporter) {
	if !job.IsSystem() {
		return
	}
	if job.Reschedule != nil {
		report(SeverityError, p.sub("reschedule"), "Invalid reschedule policy",
			fmt.Sprintf("%s jobs should not have a reschedule policy.", titleType(job.Type)))
	}
	if len(job.Spreads) > 0 && job.Type == structs.JobTypeSystem {
		report(SeverityError, p.item("spread", 0, ""), "Invalid spread", "System jobs may not have a spread block.")
	}
	for i, tg := range job.TaskGroups {
		if tg == nil {
			continue
		}
		gp := p.item("group", i, tg.Name)
		if tg.Count > 1 {
			report(SeverityError, gp.attr("count"), "Invalid count", fmt.Sprintf(
				"Job task group %s has count %d. Only count of 1 is supported with system scheduler.", tg.Name, tg.Count))
		}
		if tg.ReschedulePolicy != nil {
			report(SeverityError, gp.sub("reschedule"), "Invalid reschedule policy",
				fmt.Sprintf("%s jobs should not have a reschedule policy.", titleType(job.Type)))
		}
		if len(tg.Spreads) > 0 && job.Type == structs.JobTypeSystem {
			report(SeverityError, gp.item("spread", 0, ""), "Invalid spread", "System jobs may not have a spread block.")
		}
	}
}

func titleType(t string) string {
	if t == structs.JobTypeSysBatch {
		return "Sysbatch"
	}
	return "System"
}
