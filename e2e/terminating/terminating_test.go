// Package terminating holds the end-to-end test of a terminating gateway:
// a service outside the mesh registered through /v1/catalog/register, a
// job whose gateway group meshlet completes with a connect-terminating
// task, and a mesh client whose upstream reaches the service through the
// gateway, judged by intentions with the external service as destination.
package terminating

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	consul "github.com/hashicorp/consul/api"

	"github.com/meshlet/meshlet/e2e/framework"
)

// echoVia sends a line to web's upstream listener for legacy-db from
// inside web's allocation and reports whether it came back.
func echoVia(a *framework.Agent, allocID string) (bool, framework.CLIResult) {
	return echoPort(a, allocID, "9191")
}

// echoPort is echoVia through web's upstream listener on port.
func echoPort(a *framework.Agent, allocID, port string) (bool, framework.CLIResult) {
	r := a.Exec(allocID, "web", a.Bin, "demo-app", "tcp-client", "-addr", "127.0.0.1:"+port, "-message", "hello legacy", "-timeout", "2s")
	return r.Code == 0 && strings.TrimSpace(r.Stdout) == "hello legacy", r
}

func TestTerminatingGateway(t *testing.T) {
	a := framework.NewAgent(t, framework.Options{})
	caPEM, caKey, caFile := testCA(t)
	job := a.RunJob(jobWithCA(t, caFile))
	allocs := a.RunningAllocs(job, 3)
	web, gw := a.AllocByGroup(allocs, "web"), a.AllocByGroup(allocs, "gateway")
	legacy, _, err := a.Nomad().Allocations().Info(a.AllocByGroup(allocs, "legacy").ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	if legacy.NetworkStatus == nil || legacy.NetworkStatus.Address == "" {
		t.Fatalf("the legacy allocation has no bridge address: %+v", legacy.NetworkStatus)
	}
	// The external service: in an allocation's namespace meshlet made, at
	// its bridge address, with no sidecar.
	reg := &consul.CatalogRegistration{Node: "legacy-host", Address: legacy.NetworkStatus.Address,
		Service: &consul.AgentService{ID: "legacy-db-1", Service: "legacy-db", Port: 9090}}
	if _, err := a.Consul().Catalog().Register(reg, nil); err != nil {
		t.Fatalf("catalog register: %v", err)
	}
	a.Eventually(60*time.Second, "echo through the terminating gateway", func() bool { ok, _ := echoVia(a, web.ID); return ok })

	// TLS origination: a TLS echo server in the legacy allocation's
	// namespace, verified with the test's CA, sent the entry's SNI.
	tlsSrv := startTLSEcho(t, filepath.Join("/var/run/netns", legacy.ID), "0.0.0.0:9443", caPEM, caKey)
	reg = &consul.CatalogRegistration{Node: "legacy-host", Address: legacy.NetworkStatus.Address,
		Service: &consul.AgentService{ID: "legacy-tls-1", Service: "legacy-tls", Port: 9443}}
	if _, err := a.Consul().Catalog().Register(reg, nil); err != nil {
		t.Fatalf("catalog register: %v", err)
	}
	a.Eventually(30*time.Second, "echo through the gateway's TLS origination", func() bool { ok, _ := echoPort(a, web.ID, "9292"); return ok })
	if sni := tlsSrv.lastSNI(); sni != "legacy-tls.example" {
		t.Errorf("the TLS server saw SNI %q", sni)
	}

	t.Run("inspection", func(t *testing.T) {
		out := a.MustCLI("alloc", "status", gw.ID)
		if !strings.Contains(out, `Task "connect-terminating-tgw"`) || !strings.Contains(out, "Terminating Gateway: tgw") {
			t.Errorf("alloc status lacks the gateway task:\n%s", out)
		}
		entries, _, err := a.Consul().Health().Service("tgw", "", false, nil)
		if err != nil || len(entries) != 1 || entries[0].Service.Kind != consul.ServiceKindTerminatingGateway {
			t.Fatalf("health/service/tgw = %+v, %v", entries, err)
		}
		e, _, err := a.Consul().ConfigEntries().Get(consul.TerminatingGateway, "tgw", nil)
		if err != nil {
			t.Fatal(err)
		}
		if tg, ok := e.(*consul.TerminatingGatewayConfigEntry); !ok || len(tg.Services) != 2 || tg.Services[1].CAFile != caFile {
			t.Fatalf("terminating-gateway entry written at registration = %+v", e)
		}
		svcs, _, err := a.Consul().Catalog().Service("legacy-db", "", nil)
		if err != nil || len(svcs) != 1 || svcs[0].ServiceAddress != legacy.NetworkStatus.Address {
			t.Fatalf("catalog/service/legacy-db = %+v, %v", svcs, err)
		}
	})

	// Intentions judge web against legacy-db (the gateway acts for it).
	a.MustCLI("intention", "create", "-deny", "web", "legacy-db")
	a.Eventually(10*time.Second, "the deny to refuse web", func() bool { ok, _ := echoVia(a, web.ID); return !ok })
	if ok, r := echoPort(a, web.ID, "9292"); !ok {
		t.Fatalf("legacy-tls after a deny to legacy-db: %+v", r)
	}
	a.MustCLI("intention", "delete", "web", "legacy-db")
	a.Eventually(10*time.Second, "echo after deleting the deny", func() bool { ok, _ := echoVia(a, web.ID); return ok })

	// Deregistered, the service has no endpoint behind the gateway.
	if _, err := a.Consul().Catalog().Deregister(&consul.CatalogDeregistration{Node: "legacy-host", ServiceID: "legacy-db-1"}, nil); err != nil {
		t.Fatalf("catalog deregister: %v", err)
	}
	a.Eventually(10*time.Second, "no echo once deregistered", func() bool { ok, _ := echoVia(a, web.ID); return !ok })
}
