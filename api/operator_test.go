package api_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	nomadapi "github.com/hashicorp/nomad/api"

	"github.com/meshlet/meshlet/api"
	"github.com/meshlet/meshlet/api/apitest"
)

// snapshotFake keeps one snapshot in memory.
type snapshotFake struct {
	*apitest.Backend
	mu       sync.Mutex
	data     []byte
	restored []byte
	opts     api.SnapshotRestoreOptions
	err      error // returned by both calls when set
}

func (f *snapshotFake) SaveSnapshot(_ context.Context, w io.Writer) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	_, err := w.Write(f.data)
	return err
}

func (f *snapshotFake) RestoreSnapshot(_ context.Context, r io.Reader, opts api.SnapshotRestoreOptions) error {
	raw, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	f.restored, f.opts = raw, opts
	return nil
}

func newSnapshotFake(t *testing.T, size int) *snapshotFake {
	t.Helper()
	f := &snapshotFake{Backend: apitest.NewBackend(), data: make([]byte, size)}
	if _, err := rand.Read(f.data); err != nil {
		t.Fatal(err)
	}
	return f
}

func officialClient(t *testing.T, url string) *nomadapi.Client {
	t.Helper()
	c, err := nomadapi.NewClient(&nomadapi.Config{Address: url})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestSnapshotSaveOfficialClient: nomad/api's Operator().Snapshot reads the
// snapshot and checks it against the Digest header.
func TestSnapshotSaveOfficialClient(t *testing.T) {
	f := newSnapshotFake(t, 3<<20)
	srv := newTestServer(t, f)
	rc, err := officialClient(t, srv.URL).Operator().Snapshot(nil)
	if err != nil {
		t.Fatalf("Snapshot: %v", err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("reading the snapshot (digest checked at the end): %v", err)
	}
	if !bytes.Equal(got, f.data) {
		t.Fatalf("got %d bytes, want the backend's %d", len(got), len(f.data))
	}
	resp, err := http.Get(srv.URL + "/v1/operator/snapshot")
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "application/octet-stream" {
		t.Errorf("Content-Type = %q", ct)
	}
	if resp.ContentLength != int64(len(f.data)) || resp.Header.Get("X-Nomad-Index") == "" {
		t.Errorf("Content-Length %d, X-Nomad-Index %q", resp.ContentLength, resp.Header.Get("X-Nomad-Index"))
	}
}

// TestSnapshotRestoreOfficialClient: Operator().SnapshotRestore sends the
// body as is; ?force=true reaches the backend.
func TestSnapshotRestoreOfficialClient(t *testing.T) {
	f := newSnapshotFake(t, 1<<20)
	srv := newTestServer(t, f)
	c := officialClient(t, srv.URL)
	if _, err := c.Operator().SnapshotRestore(bytes.NewReader(f.data), nil); err != nil {
		t.Fatalf("SnapshotRestore: %v", err)
	}
	if !bytes.Equal(f.restored, f.data) || f.opts.Force {
		t.Fatalf("backend got %d bytes (force %v), want %d", len(f.restored), f.opts.Force, len(f.data))
	}
	if _, err := c.Raw().Write("/v1/operator/snapshot?force=true", bytes.NewReader([]byte("x")), nil, nil); err != nil {
		t.Fatalf("forced restore: %v", err)
	}
	if string(f.restored) != "x" || !f.opts.Force {
		t.Fatalf("backend got %q force %v, want \"x\" forced", f.restored, f.opts.Force)
	}
	if resp, body := do(t, "PUT", srv.URL+"/v1/operator/snapshot?force=maybe", "x"); resp.StatusCode != http.StatusBadRequest {
		t.Errorf("force=maybe: %d %s", resp.StatusCode, body)
	}
}

// TestSnapshotErrors: the backend's errors keep their status and message;
// a backend without snapshots answers 501.
func TestSnapshotErrors(t *testing.T) {
	f := newSnapshotFake(t, 10)
	f.err = fmt.Errorf("snapshot of another cluster: %w", api.ErrInvalid)
	srv := newTestServer(t, f)
	resp, body := do(t, "PUT", srv.URL+"/v1/operator/snapshot", "x")
	if resp.StatusCode != http.StatusBadRequest || !strings.Contains(body, "another cluster") {
		t.Errorf("refused restore: %d %q", resp.StatusCode, body)
	}
	f.err = errors.New("etcd unavailable")
	resp, body = do(t, "GET", srv.URL+"/v1/operator/snapshot", "")
	if resp.StatusCode != http.StatusInternalServerError || !strings.Contains(body, "etcd unavailable") ||
		resp.Header.Get("Digest") != "" {
		t.Errorf("failed save: %d %q digest %q", resp.StatusCode, body, resp.Header.Get("Digest"))
	}

	plain := newTestServer(t, apitest.NewBackend())
	for _, m := range []string{"GET", "PUT"} {
		if resp, body := do(t, m, plain.URL+"/v1/operator/snapshot", ""); resp.StatusCode != http.StatusNotImplemented {
			t.Errorf("%s without a SnapshotBackend: %d %q", m, resp.StatusCode, body)
		}
	}
	_, err := officialClient(t, plain.URL).Operator().Snapshot(nil)
	var ure nomadapi.UnexpectedResponseError
	if !errors.As(err, &ure) || ure.StatusCode() != http.StatusNotImplemented {
		t.Errorf("official client without a SnapshotBackend: %v", err)
	}
}
