package bench

import (
	"encoding/json"
	"fmt"
	"os"
	"slices"
)

// ReadReport reads a results.json written by WriteJSON.
func ReadReport(path string) (*Report, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("failed to read results: %w", err)
	}
	var r Report
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, fmt.Errorf("failed to decode results %s: %w", path, err)
	}
	return &r, nil
}

// MergeReports returns prev with the areas of the partial run cur in
// place of prev's same areas (or inserted where the run order puts them);
// prev's other areas, machine facts and run time stay, and every area
// from cur says in Run when and at which commit it was measured. Neither
// argument is modified.
func MergeReports(prev, cur *Report) *Report {
	out := *prev
	out.Areas = slices.Clone(prev.Areas)
	for _, a := range cur.Areas {
		na := *a
		na.Run = fmt.Sprintf("Measured in a separate run (`-areas %s`) on %s at commit %s; the machine table above is the full run's.",
			na.Key, cur.Machine.Date, cur.Machine.Commit)
		key := areaKey(&na)
		if i := slices.IndexFunc(out.Areas, func(o *Area) bool { return areaKey(o) == key }); i >= 0 {
			out.Areas[i] = &na
			continue
		}
		// Insert before the first area that runs after this one.
		pos := len(out.Areas)
		if rank := areaRank(key); rank >= 0 {
			if i := slices.IndexFunc(out.Areas, func(o *Area) bool { return areaRank(areaKey(o)) > rank }); i >= 0 {
				pos = i
			}
		}
		out.Areas = slices.Insert(out.Areas, pos, &na)
	}
	return &out
}

// areaKey is a's -areas key, from its Name for results written before
// areas carried their key; its Name when neither is known.
func areaKey(a *Area) string {
	if a.Key != "" {
		return a.Key
	}
	for _, d := range areas {
		if d.name == a.Name {
			return d.key
		}
	}
	return a.Name
}

// areaRank is the position of key in the run order, -1 when unknown.
func areaRank(key string) int {
	return slices.IndexFunc(areas, func(d area) bool { return d.key == key })
}
