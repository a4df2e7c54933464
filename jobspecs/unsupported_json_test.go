package jobspecs

import (
	"encoding/json"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	nomadapi "github.com/hashicorp/nomad/api"
)

// TestCheckUnsupportedJSON: a JSON job's blocks that meshlet does not run
// get the warnings Parse gives for HCL, and periodic and parameterized
// jobs are refused, since running them at once inverts what they ask.
func TestCheckUnsupportedJSON(t *testing.T) {
	tests := []struct {
		name, job string
		warnings  []string
		err       string
	}{
		{"plain", `{"ID":"j","TaskGroups":[{"Name":"g","Tasks":[{"Name":"t"}]}]}`, nil, ""},
		{"empty values", `{"ID":"j","Affinities":[],"AllAtOnce":false,"NodePool":"","Periodic":null,"ParameterizedJob":{},
			"TaskGroups":[{"Name":"g","EphemeralDisk":{"Sticky":false,"SizeMB":0},"Volumes":{},"Tasks":[{"Name":"t","Vault":null,"VolumeMounts":[]}]}]}`, nil, ""},
		{"warned", `{"ID":"j","Affinities":[{"LTarget":"${node.class}","RTarget":"a","Weight":50}],"NodePool":"prod",
			"TaskGroups":[{"Name":"g","EphemeralDisk":{"SizeMB":500},"Volumes":{"data":{"Type":"host","Source":"data"}},
			  "Tasks":[{"Name":"t","Vault":{"Policies":["p"]},"VolumeMounts":[{"Volume":"data","Destination":"/d"}],"identities":[{"Name":"x"}]}]},
			 "not a group",
			 {"Name":"","Tasks":[null,{"Name":"u","Schedule":{"Cron":{"Start":"0 9 * * *"}}}]}]}`, []string{
			"affinity is not supported by meshlet yet; ignored",
			"node_pool is not supported by meshlet yet; ignored",
			`group "g": ephemeral_disk is not supported by meshlet yet; ignored`,
			`group "g": volume is not supported by meshlet yet; ignored`,
			`group "g": task "t": vault is not supported by meshlet yet; ignored`,
			`group "g": task "t": volume_mount is not supported by meshlet yet; ignored`,
			`group "g": task "t": identity is not supported by meshlet yet; ignored`,
			`group[2]: task "u": schedule is not supported by meshlet yet; ignored`,
		}, ""},
		{"periodic", `{"ID":"j","Periodic":{"Enabled":true,"Spec":"*/15 * * * *","SpecType":"cron"},"TaskGroups":[]}`, nil,
			"job not supported by meshlet: periodic: a periodic job would run at once instead of on its schedule"},
		{"parameterized", `{"ID":"j","parameterizedJob":{"Payload":"required"},"Periodic":{"Spec":"@daily"}}`, nil,
			"job not supported by meshlet: periodic: a periodic job would run at once instead of on its schedule; " +
				"parameterized: a parameterized job would run at once instead of waiting to be dispatched"},
		{"not an object", `[1]`, nil, ""},
		{"null", `null`, nil, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			warnings, err := CheckUnsupportedJSON(json.RawMessage(tc.job))
			if !reflect.DeepEqual(warnings, tc.warnings) {
				t.Errorf("warnings:\n got %q\nwant %q", warnings, tc.warnings)
			}
			switch {
			case tc.err == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tc.err != "" && (!errors.Is(err, ErrUnsupported) || err.Error() != tc.err):
				t.Errorf("error = %v, want %q wrapping ErrUnsupported", err, tc.err)
			}
		})
	}
}

// A plain job canonicalized by Nomad's client (as its CLI sends it) gets
// no warning for the defaults Canonicalize fills in (ephemeral disk,
// migrate, node pool).
func TestCheckUnsupportedJSONNomadDefaults(t *testing.T) {
	job := &nomadapi.Job{ID: ptr("web"), Name: ptr("web"), Type: ptr("service"), TaskGroups: []*nomadapi.TaskGroup{{
		Name: ptr("g"), Tasks: []*nomadapi.Task{{Name: "t", Driver: "raw_exec", Config: map[string]any{"command": "/bin/true"}}}}}}
	job.Canonicalize()
	b, err := json.Marshal(job)
	if err != nil {
		t.Fatal(err)
	}
	if warnings, err := CheckUnsupportedJSON(b); len(warnings) != 0 || err != nil {
		t.Fatalf("a canonicalized plain job: warnings %q, %v; want none", warnings, err)
	}
}

// TestUnsupportedJSONFields: the JSON fields checked are those of Nomad's
// api structs, for names the HCL specs list as unsupported (one list).
func TestUnsupportedJSONFields(t *testing.T) {
	for _, level := range []struct {
		spec   spec
		fields map[string][]string
		typ    reflect.Type
	}{
		{jobSpec, unsupportedJobFields, reflect.TypeFor[nomadapi.Job]()},
		{groupSpec, unsupportedGroupFields, reflect.TypeFor[nomadapi.TaskGroup]()},
		{taskSpec, unsupportedTaskFields, reflect.TypeFor[nomadapi.Task]()},
	} {
		for name, fields := range level.fields {
			if !slices.Contains(level.spec.unsupported, name) {
				t.Errorf("%s: %q is not in the spec's unsupported list", level.typ, name)
			}
			for _, f := range fields {
				// Nomad's api dropped VaultToken and ConsulToken; older
				// clients still send them.
				if _, ok := level.typ.FieldByName(f); !ok && !strings.HasSuffix(f, "Token") {
					t.Errorf("%s has no field %s (for %q)", level.typ, f, name)
				}
			}
		}
	}
	for _, name := range []string{"periodic", "parameterized"} {
		if _, ok := refusedBlocks[name]; !ok || len(unsupportedJobFields[name]) == 0 {
			t.Errorf("%s is not refused", name)
		}
	}
}
