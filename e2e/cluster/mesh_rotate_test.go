package cluster

import (
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// meshRootList is /v1/connect/ca/roots as an agent's connect API lists it.
type meshRootList struct {
	ActiveRootID string
	Roots        []struct {
		ID       string
		RootCert string
		Active   bool
	}
}

// rootsOn reads host's /v1/connect/ca/roots (inside its namespace).
func rootsOn(host *agent) (meshRootList, error) {
	var rl meshRootList
	out, err := getOnHost(host, "http://127.0.0.1:8500/v1/connect/ca/roots")
	if err != nil {
		return rl, fmt.Errorf("%w: %s", err, out)
	}
	if err := json.Unmarshal([]byte(out), &rl); err != nil {
		return rl, fmt.Errorf("decode roots %.200s: %w", out, err)
	}
	return rl, nil
}

// rootCert is the parsed certificate of root id in rl.
func (rl meshRootList) rootCert(t *testing.T, id string) *x509.Certificate {
	t.Helper()
	for _, r := range rl.Roots {
		if r.ID != id {
			continue
		}
		chain, err := parseChain(r.RootCert)
		if err != nil {
			t.Fatalf("root %s: %v", id, err)
		}
		return chain[0]
	}
	t.Fatalf("no root %s in %+v", id, rl)
	return nil
}

func parseChain(s string) ([]*x509.Certificate, error) {
	var chain []*x509.Certificate
	for rest := []byte(s); ; {
		var b *pem.Block
		if b, rest = pem.Decode(rest); b == nil {
			break
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, err
		}
		chain = append(chain, c)
	}
	if len(chain) == 0 {
		return nil, fmt.Errorf("no certificate in %.100q", s)
	}
	return chain, nil
}

// leafOn reads the leaf of service that host's connect API serves (the
// one its sidecars are given), leaf first, then the chain it carries.
func leafOn(host *agent, service string) ([]*x509.Certificate, error) {
	out, err := getOnHost(host, "http://127.0.0.1:8500/v1/agent/connect/ca/leaf/"+service)
	if err != nil {
		return nil, fmt.Errorf("%w: %s", err, out)
	}
	var leaf struct{ CertPEM string }
	if err := json.Unmarshal([]byte(out), &leaf); err != nil {
		return nil, fmt.Errorf("decode leaf %.200s: %w", out, err)
	}
	return parseChain(leaf.CertPEM)
}

// verifiesWith reports whether chain's leaf verifies against root alone,
// with the rest of the chain as intermediates.
func verifiesWith(chain []*x509.Certificate, root *x509.Certificate) error {
	roots, inter := x509.NewCertPool(), x509.NewCertPool()
	roots.AddCert(root)
	for _, c := range chain[1:] {
		inter.AddCert(c)
	}
	_, err := chain[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageAny}})
	return err
}

// TestMeshCARotation rotates the cluster's CA root through a CLIENT agent
// (`meshlet connect ca set-config` against c1's connect API, which asks a
// server) while service-a on c1 keeps calling service-b on c2 through
// their sidecars: every agent soon lists both roots with the new one
// active, c2's leaf of service-b is re-issued under the new root (and
// still verifies against the old root alone through the cross-signed
// certificate it carries), and the requests keep succeeding.
func TestMeshCARotation(t *testing.T) {
	c := newCluster(t)
	s1 := c.AddServer("s1", 2, 1)
	c1, c2 := c.AddClient("c1", 5, s1), c.AddClient("c2", 6, s1)
	c.WaitNodesReady(60*time.Second, s1, c1, c2)
	aID := startRotationMesh(t, c, s1)
	old, err := rootsOn(c2)
	if err != nil || len(old.Roots) != 1 {
		t.Fatalf("c2's roots before the rotation: %+v, %v; want 1", old, err)
	}
	oldRoot := old.rootCert(t, old.ActiveRootID)
	if chain, err := leafOn(c2, "service-b"); err != nil || chain[0].CheckSignatureFrom(oldRoot) != nil {
		t.Fatalf("c2's leaf of service-b before the rotation is not signed by the active root %s: %v", old.ActiveRootID, err)
	}

	// A request loop across the rotation: 800 requests 20 ms apart, each
	// a new connection through the sidecars (service-a's upstream client
	// keeps no connection alive), so a new mTLS handshake.
	got := make(chan []string, 1)
	loopStart := time.Now()
	go func() { got <- c.answers(s1, aID, 800, 20*time.Millisecond) }()
	time.Sleep(3 * time.Second)

	rotated := rotateThrough(t, c, c1, "a client agent (RPC to a server)")
	newID := checkRootsRotated(t, rotated, old.ActiveRootID, 2, c1, c2, s1)
	leafAt := checkLeafRotated(t, rotated, c2, "service-b", newID, oldRoot)
	checkLeafRotated(t, rotated, c1, "service-a", newID, oldRoot)
	checkLoop(t, got, loopStart, rotated, leafAt)
	// New connections after the rotation, both sides on new-root leaves.
	if after := tally(c.answers(s1, aID, 50, 10*time.Millisecond)); after["b-0"] != 50 {
		t.Fatalf("50 requests after the rotation: %v, want all answered by b-0", after)
	}

	// A second rotation, through the server's own connect API (its CA):
	// the new root is cross-signed by the one it replaces.
	rl, err := rootsOn(c2)
	if err != nil {
		t.Fatal(err)
	}
	secondRoot := rl.rootCert(t, newID)
	again := rotateThrough(t, c, s1, "the server")
	thirdID := checkRootsRotated(t, again, newID, 3, s1, c2, c1)
	checkLeafRotated(t, again, c2, "service-b", thirdID, secondRoot)
	checkLeafRotated(t, again, c1, "service-a", thirdID, secondRoot)
	if after := tally(c.answers(s1, aID, 50, 10*time.Millisecond)); after["b-0"] != 50 {
		t.Fatalf("50 requests after the second rotation: %v, want all answered by b-0", after)
	}
}

// startRotationMesh runs meshJob with service-a on c1 and one service-b
// on c2, waits for service-a to answer through the mesh and returns
// service-a's allocation ID.
func startRotationMesh(t *testing.T, c *cluster, via *agent) string {
	t.Helper()
	c.RunJobCLI(via, "hello-mesh", edit(t, "meshJob", meshJob("c1", "c2"), "count = 2", "count = 1"))
	allocs, _ := c.WaitRunning(via, "hello-mesh", 2, 90*time.Second)
	var aID string
	for name, p := range c.placements(via, allocs) {
		switch {
		case strings.Contains(name, "service-a") && p.Node == "c1":
			aID = p.ID
		case strings.Contains(name, "service-b") && p.Node != "c2":
			t.Fatalf("%s placed on %s, want c2", name, p.Node)
		}
	}
	if aID == "" {
		t.Fatalf("service-a not placed on c1: %v", c.placements(via, allocs))
	}
	// The allocation runs once its first task does: service-a may start
	// a moment later.
	poll(t, 60*time.Second, "service-a answering through the mesh", func() (bool, string) {
		out, err := c.execIn(via, aID, "service-a", c.bin, "demo-app", "get", "-timeout", "1s", "-n", "1", "http://127.0.0.1:8080/")
		return err == nil && strings.HasPrefix(out, "200 a <- b-0"), fmt.Sprintf("%v: %s", err, out)
	})
	return aID
}

// checkLoop waits for the request loop started at loopStart and requires
// every request answered, with traffic for 2s at least after the new leaf.
func checkLoop(t *testing.T, got <-chan []string, loopStart, rotated, leafAt time.Time) {
	t.Helper()
	var res []string
	select {
	case res = <-got:
	case <-time.After(3 * time.Minute):
		t.Fatal("the request loop did not end")
	}
	loopEnd := time.Now()
	tl := tally(res)
	t.Logf("%d requests from %s to %s across the rotation (at +%s, new leaf of service-b at +%s): %v",
		len(res), loopStart.Format(time.RFC3339Nano), loopEnd.Format(time.RFC3339Nano),
		rotated.Sub(loopStart).Round(time.Millisecond), leafAt.Sub(loopStart).Round(time.Millisecond), tl)
	if len(res) != 800 {
		t.Fatalf("the request loop answered %d lines, want 800: %v", len(res), tl)
	}
	if loopEnd.Before(leafAt.Add(2 * time.Second)) {
		t.Fatalf("the request loop ended %s, before 2s of traffic under the new leaf (%s)", loopEnd, leafAt)
	}
	if tl["fail"] != 0 {
		for _, r := range res {
			if strings.HasPrefix(r, "fail") {
				t.Logf("first failure: %s", r)
				break
			}
		}
		t.Fatalf("%d of %d requests failed across the CA rotation, want none", tl["fail"], len(res))
	}
}

// rotateThrough reads the CA configuration from host's connect API and
// sets it back (a rotation), both through the CLI inside host's
// namespace; it returns when set-config returned.
func rotateThrough(t *testing.T, c *cluster, host *agent, via string) time.Time {
	t.Helper()
	cfg, err := c.CLIOnHost(host, "connect", "ca", "get-config")
	if err != nil || !strings.Contains(cfg, `"Provider": "consul"`) || !strings.Contains(cfg, `"LeafCertTTL": "72h0m0s"`) {
		t.Fatalf("connect ca get-config on %s: %v\n%s", host.Name, err, cfg)
	}
	path := filepath.Join(t.TempDir(), "ca.json")
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	out, err := c.CLIOnHost(host, "connect", "ca", "set-config", "-config-file", path)
	if err != nil || strings.TrimSpace(out) != "Configuration updated!" {
		t.Fatalf("connect ca set-config on %s: %v\n%s", host.Name, err, out)
	}
	done := time.Now()
	figure(t, "CA rotation: connect ca set-config through "+via, done.Sub(start))
	return done
}

// checkRootsRotated waits until every host lists want roots with a new
// active one (the same on all) and returns its ID.
func checkRootsRotated(t *testing.T, since time.Time, oldID string, want int, hosts ...*agent) string {
	t.Helper()
	var newID string
	for _, h := range hosts {
		poll(t, 15*time.Second, h.Name+" listing the rotated roots", func() (bool, string) {
			rl, err := rootsOn(h)
			if err != nil {
				return false, err.Error()
			}
			ok := len(rl.Roots) == want && rl.ActiveRootID != oldID && (newID == "" || rl.ActiveRootID == newID)
			if ok {
				newID = rl.ActiveRootID
			}
			return ok, fmt.Sprintf("%d roots, active %s", len(rl.Roots), rl.ActiveRootID)
		})
		figure(t, fmt.Sprintf("CA rotation: set-config returned to %s listing %d roots, the new one active", h.Name, want), time.Since(since))
	}
	return newID
}

// checkLeafRotated waits until host serves service's leaf signed by the
// new active root, checks it still verifies against the root it replaced
// (oldRoot) alone, through the cross-signed certificate it carries, and
// returns when it did.
func checkLeafRotated(t *testing.T, since time.Time, host *agent, service, newID string, oldRoot *x509.Certificate) time.Time {
	t.Helper()
	rl, err := rootsOn(host)
	if err != nil {
		t.Fatal(err)
	}
	newRoot := rl.rootCert(t, newID)
	var chain []*x509.Certificate
	poll(t, 30*time.Second, host.Name+"'s leaf of "+service+" signed by the new root", func() (bool, string) {
		var err error
		if chain, err = leafOn(host, service); err != nil {
			return false, err.Error()
		}
		if err := chain[0].CheckSignatureFrom(newRoot); err != nil {
			return false, fmt.Sprintf("leaf %s issued by %s", chain[0].SerialNumber, chain[0].Issuer)
		}
		return true, ""
	})
	at := time.Now()
	figure(t, "CA rotation: set-config returned to "+host.Name+" serving the leaf of "+service+" signed by the new root", at.Sub(since))
	if d := at.Sub(since); d > 20*time.Second {
		t.Errorf("%s's leaf of %s was re-issued under the new root %s after set-config, want within 20s", host.Name, service, d)
	}
	if err := verifiesWith(chain, newRoot); err != nil {
		t.Errorf("%s's new leaf of %s does not verify against the new root: %v", host.Name, service, err)
	}
	if err := verifiesWith(chain, oldRoot); err != nil {
		t.Errorf("%s's new leaf of %s does not verify against the old root alone (no cross-signed certificate?): %v", host.Name, service, err)
	}
	return at
}
