package connecthook

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/go-hclog"

	"github.com/meshlet/meshlet/catalog"
	"github.com/meshlet/meshlet/client/allocdir"
	"github.com/meshlet/meshlet/client/allocrunner"
	"github.com/meshlet/meshlet/connect"
	"github.com/meshlet/meshlet/structs"
)

// A docker sidecar (an Envoy image) gets its bootstrap whatever the node's
// sidecar mode, naming the control plane socket where its container sees
// it (/alloc/run/...); a connect_proxy sidecar in builtin mode gets none,
// only the container's bootstrap (connect.RuntimeBootstrapFile) its node's
// docker runtime would use.
func TestBootstrapForDockerSidecar(t *testing.T) {
	for _, tc := range []struct {
		name, driver string
		want         bool
	}{
		{"docker sidecar, builtin mode", connect.SidecarDriverDocker, true},
		{"connect_proxy sidecar, builtin mode", connect.SidecarDriverProxy, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			alloc := webAlloc(t, nil)
			tg := alloc.Job.TaskGroups[0]
			job := &structs.Job{ID: "j", Name: "j", TaskGroups: []*structs.TaskGroup{{
				Name: tg.Name, Networks: tg.Networks, Services: tg.Services,
				Tasks: []*structs.Task{{Name: "web", Driver: "raw_exec"}},
			}}}
			if err := connect.InjectWith(job, connect.Options{SidecarDriver: tc.driver}); err != nil {
				t.Fatal(err)
			}
			alloc.Job = job
			if got := connect.ProxyTask(job.TaskGroups[0], "web").Driver; got != tc.driver {
				t.Fatalf("sidecar driver %q, want %q", got, tc.driver)
			}
			ad := allocdir.New(t.TempDir(), alloc.ID)
			if err := ad.Build([]string{"web", "connect-proxy-web"}, nil); err != nil {
				t.Fatal(err)
			}
			hc := &allocrunner.AllocHookContext{Alloc: alloc, AllocDir: ad, Logger: hclog.NewNullLogger(),
				NetworkStatus: &structs.AllocNetworkStatus{InterfaceName: "eth0", Address: "10.9.0.2"}}
			socks := &sockets{served: map[string]string{}, removed: map[string]string{}}
			d := Deps{Sockets: socks, Catalog: catalog.New(), NodeID: "n1", Datacenter: "dc1", SidecarMode: connect.SidecarBuiltin,
				ValidateProxy: func(catalog.ServiceInstance) error { return nil }}
			for _, h := range Factory(d)(alloc) {
				if err := h.Prerun(context.Background(), hc); err != nil {
					t.Fatal(err)
				}
			}
			secrets := ad.TaskDir("connect-proxy-web").SecretsDir
			rt, rtErr := os.ReadFile(filepath.Join(secrets, connect.RuntimeBootstrapFile))
			js, err := os.ReadFile(filepath.Join(secrets, "envoy_bootstrap.json"))
			if !tc.want {
				if err == nil {
					t.Fatal("a bootstrap was written for a connect_proxy sidecar in builtin mode")
				}
				// The container's bootstrap, should the node run it as one.
				if rtErr != nil {
					t.Fatalf("no container bootstrap for the connect_proxy sidecar: %v", rtErr)
				}
				if !strings.Contains(string(rt), connect.ContainerSocketPath()) || strings.Contains(string(rt), ad.SharedDir) {
					t.Fatalf("container bootstrap does not name the socket at %s only:\n%s", connect.ContainerSocketPath(), rt)
				}
				return
			}
			if rtErr == nil {
				t.Error("a docker sidecar got the connect_proxy container bootstrap too")
			}
			if err != nil {
				t.Fatalf("no bootstrap for the docker sidecar: %v", err)
			}
			if !strings.Contains(string(js), connect.ContainerSocketPath()) || strings.Contains(string(js), ad.SharedDir) {
				t.Fatalf("bootstrap does not name the socket at %s only:\n%s", connect.ContainerSocketPath(), js)
			}
		})
	}
}
