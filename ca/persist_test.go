package ca

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/meshlet/meshlet/internal/testutil"
)

// TestVerifyPeerKeepsCause: the x509 reason stays in the error chain.
func TestVerifyPeerKeepsCause(t *testing.T) {
	m := newTestManager(t, Config{})
	foreign := newTestManager(t, Config{})
	fl := parseLeafChain(t, mustLeaf(t, foreign, "web"))
	_, err := m.VerifyPeer([][]byte{fl[0].Raw})
	var unknown x509.UnknownAuthorityError
	if !errors.Is(err, ErrUntrusted) || !errors.As(err, &unknown) {
		t.Fatalf("err = %v, want ErrUntrusted wrapping x509.UnknownAuthorityError", err)
	}
	_, err = m.VerifyPeer([][]byte{[]byte("garbage")})
	if u, ok := err.(interface{ Unwrap() []error }); !ok || len(u.Unwrap()) != 2 {
		t.Fatalf("parse error is not wrapped with its cause: %v", err)
	}
}

func TestNewCADirStartsFresh(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "ca")
	m := newTestManager(t, Config{Dir: dir})
	for _, name := range []string{stateFileName, MarkerName} {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Fatalf("fresh CA did not write %s: %v", name, err)
		}
	}
	td := m.TrustDomain()
	_ = m.Close()
	if again := newTestManager(t, Config{Dir: dir}); again.TrustDomain() != td {
		t.Fatal("trust domain changed across a restart")
	}
}

func TestLostCAStateRefused(t *testing.T) {
	dir := t.TempDir()
	m := newTestManager(t, Config{Dir: dir})
	td := m.TrustDomain()
	_ = m.Close()
	path := filepath.Join(dir, stateFileName)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	corrupt := bytes.Replace(good, []byte(`"CreateIndex": 1,`), []byte(`"CreateIndex": 2,`), 1)
	if bytes.Equal(corrupt, good) {
		t.Fatalf("test setup: no CreateIndex to corrupt in\n%s", good)
	}
	keys, _ := filepath.Glob(filepath.Join(dir, "root-*.key"))
	if len(keys) != 1 {
		t.Fatalf("root keys: %v", keys)
	}
	key, _ := os.ReadFile(keys[0])
	cases := []struct {
		name    string
		prepare func() error
		want    error
	}{
		{"root key deleted", func() error { return os.Remove(keys[0]) }, ErrStateMissing},
		{"deleted", func() error { return os.Remove(path) }, ErrStateMissing},
		{"deleted with marker gone", func() error {
			_ = os.Remove(filepath.Join(dir, MarkerName))
			return os.Remove(path)
		}, ErrStateMissing}, // the root key still shows a CA lived here
		{"empty", func() error { return os.WriteFile(path, nil, 0o600) }, ErrStateCorrupt},
		{"truncated", func() error { return os.WriteFile(path, good[:len(good)/2], 0o600) }, ErrStateCorrupt},
		{"checksum", func() error { return os.WriteFile(path, corrupt, 0o600) }, ErrStateCorrupt},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.prepare(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				_ = os.WriteFile(path, good, 0o600)
				_ = os.WriteFile(keys[0], key, 0o600)
				_ = writeMarker(dir)
			})
			damaged, _ := os.ReadFile(path)
			_, err := New(Config{Dir: dir}, nil, nil)
			if !errors.Is(err, tc.want) {
				t.Fatalf("New = %v, want %v", err, tc.want)
			}
			if msg := err.Error(); !strings.Contains(msg, dir) || !strings.Contains(msg, "backup") || strings.Contains(msg, "\n") {
				t.Fatalf("error does not name the file and the recovery on one line: %q", msg)
			}
			if now, _ := os.ReadFile(path); !bytes.Equal(now, damaged) {
				t.Fatal("a refused start rewrote the state file")
			}
		})
	}
	if again := newTestManager(t, Config{Dir: dir}); again.TrustDomain() != td {
		t.Fatal("restored state does not load")
	}
}

// TestLoadsCAStateVersion1: state written before checksums loads, gets a
// marker, and is rewritten as version 2 at the next change.
func TestLoadsCAStateVersion1(t *testing.T) {
	dir := t.TempDir()
	m := newTestManager(t, Config{Dir: dir})
	td := m.TrustDomain()
	_ = m.Close()
	path := filepath.Join(dir, stateFileName)
	b, _ := os.ReadFile(path)
	var env struct {
		Version int
		State   json.RawMessage
	}
	if err := json.Unmarshal(b, &env); err != nil || env.Version != 2 {
		t.Fatalf("state is not version 2: %v\n%s", err, b)
	}
	var st map[string]any
	if err := json.Unmarshal(env.State, &st); err != nil {
		t.Fatal(err)
	}
	st["Version"] = 1
	v1, _ := json.Marshal(st)
	if err := os.WriteFile(path, v1, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, MarkerName)); err != nil {
		t.Fatal(err)
	}
	again := newTestManager(t, Config{Dir: dir})
	if again.TrustDomain() != td {
		t.Fatal("version 1 state not loaded")
	}
	if _, err := os.Stat(filepath.Join(dir, MarkerName)); err != nil {
		t.Fatalf("no marker after loading version 1 state: %v", err)
	}
	if err := again.Rotate(context.Background()); err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(path)
	if !bytes.Contains(b, []byte(`"Version": 2`)) || !bytes.Contains(b, []byte(`"SHA256"`)) {
		t.Fatalf("state is not rewritten as version 2 at the next change:\n%s", b)
	}
}

// TestFirstStartOnFullDiskLeavesNothing: a first start whose state write
// fails (a full disk) removes the root key it wrote, so the next start,
// with space again, makes the CA instead of refusing a directory that
// seems to have lost its state.
func TestFirstStartOnFullDiskLeavesNothing(t *testing.T) {
	testutil.RequireRoot(t)
	dir := t.TempDir()
	if err := syscall.Mount("tmpfs", dir, "tmpfs", 0, "size=4096"); err != nil {
		t.Skipf("cannot mount a small tmpfs: %v", err)
	}
	t.Cleanup(func() { _ = syscall.Unmount(dir, 0) })
	if _, err := New(Config{Dir: dir}, nil, nil); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("New on a one-page tmpfs = %v, want ENOSPC writing the state", err)
	}
	if left, _ := os.ReadDir(dir); len(left) != 0 {
		t.Fatalf("a failed first start left %v", left)
	}
	if err := syscall.Mount("tmpfs", dir, "tmpfs", syscall.MS_REMOUNT, "size=1m"); err != nil {
		t.Fatalf("remount: %v", err)
	}
	m := newTestManager(t, Config{Dir: dir})
	if m.TrustDomain() == "" {
		t.Fatal("no trust domain")
	}
}
