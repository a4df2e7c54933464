package jobspecs

import (
	"fmt"
	"strings"

	"github.com/meshlet/meshlet/structs"
)

// checkSpreads applies Nomad's rules to the spread blocks of a job or
// group: an attribute, a weight of 1-100, target percents of 0-100 that
// add up to at most 100, each target value once.
func checkSpreads(ss []*structs.Spread, p path, report reporter) {
	for i, s := range ss {
		if s == nil {
			continue
		}
		sp := p.item("spread", i, "")
		switch {
		case strings.TrimSpace(s.Attribute) == "":
			report(SeverityError, sp, "Missing spread attribute",
				`A spread needs an attribute, e.g. attribute = "${node.datacenter}".`)
		case !strings.HasPrefix(s.Attribute, "${") || !strings.HasSuffix(s.Attribute, "}"):
			report(SeverityError, sp.attr("attribute"), "Invalid spread attribute",
				fmt.Sprintf("Attribute %q must name a node attribute, e.g. \"${node.datacenter}\" or \"${meta.rack}\".", s.Attribute))
		}
		if s.Weight != nil && (*s.Weight < 1 || *s.Weight > 100) {
			report(SeverityError, sp.attr("weight"), "Invalid spread weight",
				fmt.Sprintf("Weight %d is out of range 1-100.", *s.Weight))
		}
		sum := 0
		seen := map[string]bool{}
		for j, t := range s.SpreadTarget {
			if t == nil {
				continue
			}
			tp := sp.item("target", j, t.Value)
			if seen[t.Value] {
				report(SeverityError, tp, "Duplicate spread target",
					fmt.Sprintf("Target %q is defined more than once in this spread.", t.Value))
			}
			seen[t.Value] = true
			if t.Percent < 0 || t.Percent > 100 {
				report(SeverityError, tp.attr("percent"), "Invalid spread target percent",
					fmt.Sprintf("Percent %d for target %q is out of range 0-100.", t.Percent, t.Value))
				continue
			}
			sum += t.Percent
		}
		if sum > 100 {
			report(SeverityError, sp, "Invalid spread targets",
				fmt.Sprintf("The target percents add up to %d%%; they must not exceed 100%%.", sum))
		}
	}
}
