package jobspecs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// ErrUnsupported is wrapped by CheckUnsupportedJSON's error: the job asks
// for something meshlet would do the opposite of.
var ErrUnsupported = errors.New("job not supported by meshlet")

// The fields of Nomad's api.Job, api.TaskGroup and api.Task that carry, in
// a JSON job, the blocks jobSpec, groupSpec and taskSpec list as
// unsupported (keyed by those HCL names, so the specs stay the one list).
// An unsupported name without an entry has no field there (group vault,
// task spread...).
var (
	unsupportedJobFields = map[string][]string{
		"periodic": {"Periodic"}, "parameterized": {"ParameterizedJob"}, "multiregion": {"Multiregion"},
		"affinity": {"Affinities"}, "migrate": {"Migrate"}, "ui": {"UI"}, "all_at_once": {"AllAtOnce"},
		"node_pool": {"NodePool"}, "vault_token": {"VaultToken"}, "consul_token": {"ConsulToken"},
		"consul_namespace": {"ConsulNamespace"}, "vault_namespace": {"VaultNamespace"},
	}
	unsupportedGroupFields = map[string][]string{
		"ephemeral_disk": {"EphemeralDisk"}, "volume": {"Volumes"}, "scaling": {"Scaling"},
		"affinity": {"Affinities"}, "migrate": {"Migrate"}, "disconnect": {"Disconnect"}, "consul": {"Consul"},
		"stop_after_client_disconnect": {"StopAfterClientDisconnect"},
		"max_client_disconnect":        {"MaxClientDisconnect"},
		"prevent_reschedule_on_lost":   {"PreventRescheduleOnLost"},
	}
	unsupportedTaskFields = map[string][]string{
		"vault": {"Vault"}, "volume_mount": {"VolumeMounts"}, "dispatch_payload": {"DispatchPayload"},
		"scaling": {"ScalingPolicies"}, "csi_plugin": {"CSIPluginConfig"}, "identity": {"Identity", "Identities"},
		"affinity": {"Affinities"}, "consul": {"Consul"}, "action": {"Actions"}, "schedule": {"Schedule"},
	}
)

// refusedBlocks are the unsupported job blocks a job may not have at all,
// in HCL or JSON: ignoring them would run the job at once, the opposite of
// what it asks.
var refusedBlocks = map[string]string{
	"periodic":      "a periodic job would run at once instead of on its schedule",
	"parameterized": "a parameterized job would run at once instead of waiting to be dispatched",
}

// CheckUnsupportedJSON reports the blocks of a JSON job (Nomad's api.Job,
// as PUT /v1/jobs receives it) that meshlet does not run and that decoding
// it into structs.Job drops: the same blocks, and the same warnings, as
// Parse reports for HCL (`group "g": task "t": vault is not supported by
// meshlet yet; ignored`). Only values that are set count: null, false, 0,
// "" and empty lists or objects do not. periodic and parameterized are an
// error wrapping ErrUnsupported instead. A job that is not a JSON object
// gives nothing: decoding it reports that.
func CheckUnsupportedJSON(job json.RawMessage) (warnings []string, err error) {
	var j map[string]any
	dec := json.NewDecoder(bytes.NewReader(job))
	dec.UseNumber()
	if dec.Decode(&j) != nil {
		return nil, nil
	}
	var refused []string
	for _, name := range jobSpec.unsupported {
		if !setField(j, unsupportedJobFields[name]) {
			continue
		}
		if why, ok := refusedBlocks[name]; ok {
			refused = append(refused, name+": "+why)
			continue
		}
		warnings = append(warnings, unsupportedMsg(name))
	}
	if len(refused) > 0 {
		return warnings, fmt.Errorf("%w: %s", ErrUnsupported, strings.Join(refused, "; "))
	}
	for i, g := range objects(field(j, "TaskGroups")) {
		if g == nil {
			continue
		}
		gp := jobPath.item("group", i, str(field(g, "Name")))
		warnings = append(warnings, unsupportedIn(g, gp, groupSpec.unsupported, unsupportedGroupFields)...)
		for k, t := range objects(field(g, "Tasks")) {
			if t == nil {
				continue
			}
			tp := gp.item("task", k, str(field(t, "Name")))
			warnings = append(warnings, unsupportedIn(t, tp, taskSpec.unsupported, unsupportedTaskFields)...)
		}
	}
	return warnings, nil
}

// unsupportedIn warns about each unsupported name whose fields obj sets.
func unsupportedIn(obj map[string]any, p path, names []string, fields map[string][]string) []string {
	var out []string
	for _, name := range names {
		if setField(obj, fields[name]) {
			out = append(out, joinHuman(p.human, unsupportedMsg(name)))
		}
	}
	return out
}

// setField reports whether obj sets any of the fields (matched as
// encoding/json does, ignoring case) to a value that is neither empty nor
// the default Nomad's Canonicalize fills in (a job its CLI sends).
func setField(obj map[string]any, fields []string) bool {
	for _, f := range fields {
		if v := field(obj, f); !emptyJSON(v) && !nomadDefault(f, v) {
			return true
		}
	}
	return false
}

// nomadDefaults are the values api.Job.Canonicalize gives unsupported
// fields a job did not set: its group's ephemeral disk, a service job's
// migrate strategy, the default node pool.
var nomadDefaults = map[string]map[string]any{
	"EphemeralDisk": {"Sticky": false, "Migrate": false, "SizeMB": 300.0},
	"Migrate":       {"MaxParallel": 1.0, "HealthCheck": "checks", "MinHealthyTime": 10e9, "HealthyDeadline": 300e9},
}

func nomadDefault(name string, v any) bool {
	if s, ok := v.(string); ok && strings.EqualFold(name, "NodePool") {
		return s == "default"
	}
	obj, ok := v.(map[string]any)
	def, known := nomadDefaults[name]
	if !ok || !known {
		return false
	}
	for k, e := range obj {
		d, listed := def[k]
		if !listed && emptyJSON(e) {
			continue
		}
		if !listed || !sameJSONValue(e, d) {
			return false
		}
	}
	return true
}

// sameJSONValue compares a decoded JSON value (numbers as json.Number)
// with a default.
func sameJSONValue(v, def any) bool {
	if n, ok := v.(json.Number); ok {
		f, err := n.Float64()
		d, isNum := def.(float64)
		return err == nil && isNum && f == d
	}
	return v == def
}

// field is obj's value for name, matched ignoring case; nil when absent.
func field(obj map[string]any, name string) any {
	if v, ok := obj[name]; ok {
		return v
	}
	for k, v := range obj {
		if strings.EqualFold(k, name) {
			return v
		}
	}
	return nil
}

// emptyJSON reports null, false, 0, "", and lists and objects of only
// such values.
func emptyJSON(v any) bool {
	switch v := v.(type) {
	case nil:
		return true
	case bool:
		return !v
	case string:
		return v == ""
	case json.Number:
		f, err := strconv.ParseFloat(string(v), 64)
		return err == nil && f == 0
	case []any:
		for _, e := range v {
			if !emptyJSON(e) {
				return false
			}
		}
		return true
	case map[string]any:
		for _, e := range v {
			if !emptyJSON(e) {
				return false
			}
		}
		return true
	}
	return false
}

// objects are the elements of a JSON list, each nil unless an object.
func objects(v any) []map[string]any {
	list, _ := v.([]any)
	out := make([]map[string]any, len(list))
	for i, e := range list {
		out[i], _ = e.(map[string]any)
	}
	return out
}

func str(v any) string {
	s, _ := v.(string)
	return s
}
