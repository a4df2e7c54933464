package structs

import "encoding/json"

// UnmarshalJSON decodes a task group, defaulting an absent or null Count to
// 1 as Nomad does, so that an explicit "Count": 0 (scale to zero) is kept.
func (tg *TaskGroup) UnmarshalJSON(b []byte) error {
	type plain TaskGroup
	aux := struct {
		*plain
		Count *int `json:"Count"`
	}{plain: (*plain)(tg)}
	if err := json.Unmarshal(b, &aux); err != nil {
		return err
	}
	tg.Count = 1
	if aux.Count != nil {
		tg.Count = *aux.Count
	}
	return nil
}
