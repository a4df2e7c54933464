package connecthook

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/meshlet/meshlet/acl"
	"github.com/meshlet/meshlet/client/allocdir"
)

// tokenSource hands out numbered secrets, or err.
type tokenSource struct {
	mu    sync.Mutex
	calls []string
	err   error
}

func (s *tokenSource) DeriveSIToken(_ context.Context, allocID, task string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, allocID+"/"+task)
	if s.err != nil {
		return "", s.err
	}
	return "secret-" + task, nil
}

func siTokenFile(t *testing.T, ad *allocdir.AllocDir) (string, os.FileInfo) {
	t.Helper()
	p := filepath.Join(ad.TaskDir("connect-proxy-web").SecretsDir, "si_token")
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatalf("si_token: %v", err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b), fi
}

// With ACLs each sidecar task gets its token in secrets/si_token (0600)
// and, in Envoy mode, as the bootstrap's x-consul-token; a restored
// allocation keeps the token it has (its sidecar may run with it).
func TestSidecarTokens(t *testing.T) {
	src := &tokenSource{}
	ad := allocdir.New(t.TempDir(), "a1")
	hc, _, _, _, err := runDeps(t, "envoy", nil, func(d *Deps) { d.SITokens = src }, ad)
	if err != nil {
		t.Fatal(err)
	}
	secret, fi := siTokenFile(t, ad)
	if secret != "secret-connect-proxy-web" || fi.Mode().Perm() != 0o600 {
		t.Fatalf("si_token = %q mode %v", secret, fi.Mode().Perm())
	}
	js, err := os.ReadFile(filepath.Join(hc.AllocDir.TaskDir("connect-proxy-web").SecretsDir, "envoy_bootstrap.json"))
	if err != nil {
		t.Fatal(err)
	}
	b := &bootstrapv3.Bootstrap{}
	if err := protojson.Unmarshal(js, b); err != nil {
		t.Fatal(err)
	}
	var sent string
	for _, md := range b.GetDynamicResources().GetAdsConfig().GetGrpcServices()[0].GetInitialMetadata() {
		if md.GetKey() == "x-consul-token" {
			sent = md.GetValue()
		}
	}
	if sent != secret {
		t.Errorf("bootstrap x-consul-token = %q, want the sidecar's token", sent)
	}

	// Restore: the same directory, a new hook; the token is kept.
	if _, _, _, _, err := runDeps(t, "envoy", nil, func(d *Deps) { d.SITokens = src }, ad); err != nil {
		t.Fatal(err)
	}
	if len(src.calls) != 1 || src.calls[0] != "a1/connect-proxy-web" {
		t.Errorf("derivations = %v, want one for the sidecar task", src.calls)
	}
}

// Servers without ACLs: no token and no file; a refusal fails the
// allocation before any task starts, naming the task.
func TestSidecarTokensDisabledOrRefused(t *testing.T) {
	ad := allocdir.New(t.TempDir(), "a1")
	if _, _, _, _, err := runDeps(t, "builtin", nil, func(d *Deps) { d.SITokens = &tokenSource{err: acl.ErrDisabled} }, ad); err != nil {
		t.Fatalf("ACLs disabled: %v", err)
	}
	if _, err := os.Stat(filepath.Join(ad.TaskDir("connect-proxy-web").SecretsDir, "si_token")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("si_token written without ACLs: %v", err)
	}
	_, _, _, _, err := runDeps(t, "builtin", nil, func(d *Deps) { d.SITokens = &tokenSource{err: errors.New("permission denied")} }, nil)
	if err == nil || !strings.Contains(err.Error(), `task "connect-proxy-web"`) {
		t.Fatalf("refused derivation: %v", err)
	}
}
