package ingress

import (
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/meshlet/meshlet/e2e/framework"
	"github.com/meshlet/meshlet/internal/testutil"
)

// TestIngressWildcard: an http listener routing "*" reaches every mesh
// service of protocol http by "<service>.ingress.*", and follows services
// as they come and go.
func TestIngressWildcard(t *testing.T) {
	a := framework.NewAgent(t, framework.Options{})
	for _, svc := range []string{"wa", "wlate"} {
		if r := a.CLIStdin([]byte("Kind = \"service-defaults\"\nName = \""+svc+"\"\nProtocol = \"http\"\n"), "config", "write", "-"); r.Code != 0 {
			t.Fatalf("config write service-defaults %s: %s %s", svc, r.Stdout, r.Stderr)
		}
	}
	httpPort := testutil.FreePort(t)
	job := a.RunJob(writeJob(t, "input/ingress-wildcard.hcl", strings.NewReplacer("HTTP_PORT", strconv.Itoa(httpPort))))
	a.RunningAllocs(job, 2)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(httpPort))
	answers := func(host, want string) func() bool {
		return func() bool {
			code, body, err := getHost(addr, host)
			return err == nil && code == http.StatusOK && body == want
		}
	}
	a.Eventually(60*time.Second, "wa through the wildcard listener", answers("wa.ingress.consul", "wa"))

	late := a.RunJob("input/wildcard-late.hcl")
	a.RunningAllocs(late, 1)
	a.Eventually(60*time.Second, "a service that joined later through the wildcard listener", answers("wlate.ingress.consul:"+strconv.Itoa(httpPort), "wlate"))

	a.MustCLI("job", "stop", "-purge", late)
	a.Eventually(60*time.Second, "the stopped service gone from the wildcard listener", func() bool {
		code, _, err := getHost(addr, "wlate.ingress.consul")
		return err == nil && code == http.StatusNotFound
	})
	if ok := answers("wa.ingress.consul", "wa")(); !ok {
		t.Fatal("wa stopped answering through the wildcard listener")
	}
}
