package framework

import (
	"strings"
	"time"

	consulapi "github.com/hashicorp/consul/api"
	nomadapi "github.com/hashicorp/nomad/api"
)

// bootstrapACL makes the agent's one bootstrap (management) token as soon
// as its API answers, and keeps its secret in Token.
func (a *Agent) bootstrapACL() {
	a.t.Helper()
	c, err := nomadapi.NewClient(&nomadapi.Config{Address: a.HTTPAddr, HttpClient: a.apiHTTPClient()})
	if err != nil {
		a.t.Fatalf("nomad api client: %v", err)
	}
	defer c.Close()
	deadline := time.Now().Add(30 * time.Second)
	for {
		tok, _, err := c.ACLTokens().Bootstrap(nil)
		if err == nil {
			a.Token = tok.SecretID
			return
		}
		select {
		case <-a.done:
			a.t.Fatalf("agent exited during start:\n%s", a.Log())
		default:
		}
		if time.Now().After(deadline) {
			a.t.Fatalf("ACL bootstrap failed for 30s (last error: %v):\n%s", err, a.Log())
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Consul returns an official Consul API client of the agent's
// Consul-shaped API, with the harness's token.
func (a *Agent) Consul() *consulapi.Client {
	a.t.Helper()
	c, err := consulapi.NewClient(&consulapi.Config{Address: strings.TrimPrefix(a.ConnectAddr, "http://"), Token: a.Token,
		HttpClient: a.apiHTTPClient()})
	if err != nil {
		a.t.Fatalf("consul api client: %v", err)
	}
	return c
}
