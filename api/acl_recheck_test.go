package api_test

import (
	"bufio"
	"context"
	"io"
	"slices"
	"strings"
	"testing"
	"time"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/acl"
	"github.com/meshlet/meshlet/api"
)

// logReader grants read-logs in the default namespace.
type logReader struct{ *acl.ACL }

func (logReader) AllowNamespaceOperation(ns, capability string) bool {
	return ns == "default" && capability == acl.NamespaceCapabilityReadLogs
}

// newRecheckFixture is an ACL fixture rechecking the tokens of long-lived
// requests every few milliseconds, where the "node-exec" policy grants
// exec into raw_exec tasks and "logs" grants read-logs.
func newRecheckFixture(t *testing.T) (*aclFixture, string, *nomadapi.Allocation) {
	t.Helper()
	f := newACLFixture(t, api.WithACLRecheck(20*time.Millisecond), api.WithAuthorizer(func(a *acl.ACL, tok *acl.Token) api.Authorizer {
		switch {
		case tok != nil && slices.Contains(tok.Policies, "node-exec"):
			return execer{ACL: a, node: true}
		case tok != nil && slices.Contains(tok.Policies, "logs"):
			return logReader{ACL: a}
		}
		return a
	}))
	mgmt := f.bootstrap(t)
	for _, p := range []string{"node-exec", "logs", "other"} {
		if _, err := f.client(t, mgmt).ACLPolicies().Upsert(&nomadapi.ACLPolicy{Name: p, Rules: `node { policy = "read" }`}, nil); err != nil {
			t.Fatalf("policy %s: %v", p, err)
		}
	}
	if _, err := f.fb.RegisterJob(context.Background(), testJob("shell"), api.RegisterOptions{}); err != nil {
		t.Fatalf("register: %v", err)
	}
	alloc, _, err := f.client(t, mgmt).Allocations().Info(f.fb.Allocations()[0].ID, nil)
	if err != nil {
		t.Fatalf("alloc info: %v", err)
	}
	return f, mgmt, alloc
}

// TestACLExecEndsWhenTokenRevoked: an exec session (a shell on the node)
// ends once its token is deleted, instead of outliving the revocation;
// while the token stands the session goes on.
func TestACLExecEndsWhenTokenRevoked(t *testing.T) {
	f, mgmt, alloc := newRecheckFixture(t)
	tok := f.clientToken(t, mgmt, "node-exec")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	stdinR, stdinW := io.Pipe()
	defer stdinW.Close()
	outR, outW := io.Pipe()
	done := make(chan error, 1)
	go func() {
		_, err := f.client(t, tok.SecretID).Allocations().Exec(ctx, alloc, "app", false, []string{"cat"},
			stdinR, outW, io.Discard, nil, nil)
		_ = outW.CloseWithError(io.EOF)
		done <- err
	}()
	out := bufio.NewReader(outR)
	echo := func(line string) {
		t.Helper()
		if _, err := io.WriteString(stdinW, line+"\n"); err != nil {
			t.Fatalf("stdin: %v", err)
		}
		if got, err := out.ReadString('\n'); err != nil || strings.TrimSpace(got) != line {
			t.Fatalf("echo of %q = %q, %v", line, got, err)
		}
	}
	echo("one")
	time.Sleep(150 * time.Millisecond) // several rechecks: the token stands
	echo("two")
	if _, err := f.client(t, mgmt).ACLTokens().Delete(tok.AccessorID, nil); err != nil {
		t.Fatalf("delete token: %v", err)
	}
	go func() { _, _ = io.Copy(io.Discard, out) }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "no longer allows it") {
			t.Fatalf("Exec after the token was deleted = %v, want the revocation as the reason", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the exec session went on after its token was deleted")
	}
}

// TestACLLogFollowEndsWhenPermissionLost: a followed log stream ends once
// its token no longer grants read-logs.
func TestACLLogFollowEndsWhenPermissionLost(t *testing.T) {
	f, mgmt, alloc := newRecheckFixture(t)
	tok := f.clientToken(t, mgmt, "logs")
	f.fb.AppendTaskLog("app", "stdout", "first\n")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cancelCh := make(chan struct{})
	defer close(cancelCh)
	frames, errs := f.client(t, tok.SecretID).AllocFS().Logs(alloc, true, "app", "stdout", "start", 0, cancelCh,
		(&nomadapi.QueryOptions{}).WithContext(ctx))
	next := func() (*nomadapi.StreamFrame, bool) {
		select {
		case fr, ok := <-frames:
			return fr, ok
		case err := <-errs:
			t.Fatalf("log stream error: %v", err)
		case <-time.After(3 * time.Second):
		}
		return nil, true
	}
	if fr, ok := next(); !ok || fr == nil || !strings.Contains(string(fr.Data), "first") {
		t.Fatalf("first frame = %+v, %v", fr, ok)
	}
	time.Sleep(150 * time.Millisecond) // several rechecks: the token stands
	f.fb.AppendTaskLog("app", "stdout", "second\n")
	if fr, ok := next(); !ok || fr == nil || !strings.Contains(string(fr.Data), "second") {
		t.Fatalf("second frame = %+v, %v", fr, ok)
	}
	tok.Policies = []string{"other"}
	if _, _, err := f.client(t, mgmt).ACLTokens().Update(tok, nil); err != nil {
		t.Fatalf("update token: %v", err)
	}
	deadline := time.After(3 * time.Second)
	for {
		select {
		case _, ok := <-frames:
			if !ok {
				return
			}
		case <-errs:
			return
		case <-deadline:
			t.Fatal("the log stream went on after its token lost read-logs")
		}
	}
}
