package api

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strconv"
)

// MaxSnapshotBytes bounds the body of a snapshot restore.
const MaxSnapshotBytes = 1 << 30

// SnapshotBackend saves and restores the servers' state (`meshlet operator
// snapshot save|restore`); a Backend without it answers 501.
type SnapshotBackend interface {
	// SaveSnapshot writes a snapshot of the state to w.
	SaveSnapshot(ctx context.Context, w io.Writer) error
	// RestoreSnapshot replaces the state with the snapshot r holds; a
	// damaged snapshot or one of another cluster (unless opts.Force) is
	// refused with an error wrapping ErrInvalid, and changes nothing.
	RestoreSnapshot(ctx context.Context, r io.Reader, opts SnapshotRestoreOptions) error
}

// SnapshotRestoreOptions tune a restore.
type SnapshotRestoreOptions struct {
	// Force restores a snapshot of another cluster (?force=true).
	Force bool
}

func (s *Server) operatorRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /v1/operator/snapshot", s.snapshotSave)
	mux.HandleFunc("PUT /v1/operator/snapshot", s.snapshotRestore)
}

var errNoSnapshots = errors.New("this agent cannot save or restore snapshots (it runs no server with the etcd state store)")

func (s *Server) snapshots(w http.ResponseWriter) (SnapshotBackend, bool) {
	sb, ok := s.b.(SnapshotBackend)
	if !ok {
		http.Error(w, errNoSnapshots.Error(), http.StatusNotImplemented)
	}
	return sb, ok
}

// snapshotSave answers GET /v1/operator/snapshot as Nomad does: the
// snapshot as application/octet-stream with a Digest header, which
// nomad/api's Operator().Snapshot checks. The snapshot is written to a
// temporary file first: the digest must precede the body.
func (s *Server) snapshotSave(w http.ResponseWriter, r *http.Request) {
	sb, ok := s.snapshots(w)
	if !ok {
		return
	}
	f, err := os.CreateTemp("", "meshlet-snapshot-*")
	if err != nil {
		s.writeError(w, r, fmt.Errorf("failed to create a temporary snapshot file: %w", err))
		return
	}
	defer func() {
		_ = f.Close()
		_ = os.Remove(f.Name())
	}()
	ctx, cancel := s.requestContext(r)
	defer cancel()
	sum := sha256.New()
	idx := s.b.Index()
	if err := sb.SaveSnapshot(ctx, io.MultiWriter(f, sum)); err != nil {
		s.writeError(w, r, err)
		return
	}
	size, err := f.Seek(0, io.SeekCurrent)
	if err == nil {
		_, err = f.Seek(0, io.SeekStart)
	}
	if err != nil {
		s.writeError(w, r, fmt.Errorf("failed to read the temporary snapshot file: %w", err))
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Length", strconv.FormatInt(size, 10))
	h.Set("Digest", "sha-256="+base64.StdEncoding.EncodeToString(sum.Sum(nil)))
	setQueryMeta(w, idx)
	if _, err := io.Copy(w, f); err != nil {
		s.logger.Debug("failed to send a snapshot", "error", err)
	}
}

// snapshotRestore answers PUT /v1/operator/snapshot: the body is the
// snapshot (at most MaxSnapshotBytes); ?force=true restores a snapshot of
// another cluster.
func (s *Server) snapshotRestore(w http.ResponseWriter, r *http.Request) {
	sb, ok := s.snapshots(w)
	if !ok {
		return
	}
	force, err := queryBool(r, "force", false)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	body := &bodyLimit{r: http.MaxBytesReader(w, r.Body, MaxSnapshotBytes)}
	ctx, cancel := s.requestContext(r)
	defer cancel()
	if err := sb.RestoreSnapshot(ctx, body, SnapshotRestoreOptions{Force: force}); err != nil {
		if body.hit {
			http.Error(w, fmt.Sprintf("snapshot larger than %d bytes", MaxSnapshotBytes), http.StatusRequestEntityTooLarge)
			return
		}
		s.writeError(w, r, err)
		return
	}
	setQueryMeta(w, s.b.Index())
	s.writeJSON(w, r, struct{}{})
}

// bodyLimit notes that a MaxBytesReader refused to read on (the backend
// may not wrap the error it got).
type bodyLimit struct {
	r   io.Reader
	hit bool
}

func (b *bodyLimit) Read(p []byte) (int, error) {
	n, err := b.r.Read(p)
	var tooLarge *http.MaxBytesError
	if errors.As(err, &tooLarge) {
		b.hit = true
	}
	return n, err
}
