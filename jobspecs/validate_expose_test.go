package jobspecs

import (
	"strings"
	"testing"

	"github.com/meshlet/meshlet/connect"
)

// A job as the server stores it after connect.Inject (what `job inspect`
// prints) validates again: the generated svc_<service>_ck_<hash> port,
// the check's port and the added expose paths obey the rules.
func TestExposeInjectedJobRevalidates(t *testing.T) {
	job, diags := ParseFile("testdata/valid/expose.hcl", nil)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	Canonicalize(job)
	if err := connect.Inject(job); err != nil {
		t.Fatal(err)
	}
	s := job.TaskGroups[0].Services[0]
	if n := len(s.Connect.SidecarService.Proxy.Expose.Paths); n != 3 {
		t.Fatalf("%d expose paths after Inject, want 3", n)
	}
	if _, err := ValidateWith(job, Unbounded()); err != nil {
		t.Fatalf("the injected job no longer validates: %v", err)
	}
}

// Jobs from the JSON API get the same rules, located by path.
func TestExposeValidateJSONJob(t *testing.T) {
	job, diags := ParseFile("testdata/valid/expose.hcl", nil)
	if diags.HasErrors() {
		t.Fatal(diags.Error())
	}
	px := job.TaskGroups[0].Services[0].Connect.SidecarService.Proxy
	px.Expose.Paths[0].ListenerPort = "http"
	px.Expose.Paths[0].Protocol = "tcp"
	_, err := ValidateWith(job, Unbounded())
	for _, want := range []string{
		`group "api": service "api": connect: sidecar_service: proxy: expose: path[0]: Invalid expose port; Expose listener_port "http" is the port of the service`,
		`path[0]: Invalid expose protocol; Expose path "/metrics": protocol "tcp" is not valid`,
	} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("ValidateWith error %v\nlacks %q", err, want)
		}
	}
}
