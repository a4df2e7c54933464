package template

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/meshlet/meshlet/internal/nofollow"
)

// Sentinel errors of the sandboxed file access.
var (
	// ErrEscapes is returned for a path that leads out of its sandbox.
	ErrEscapes = errors.New("path escapes the task's sandbox")
	// ErrNotRegular is returned for a file read that is not a regular
	// file (a FIFO or a device the task made would block or never end).
	ErrNotRegular = nofollow.ErrNotRegular
	// ErrTooLarge is returned for a render over maxRenderBytes.
	ErrTooLarge = errors.New("template output is over the size limit")
)

// relInside returns p relative to root when p is root or below it.
func relInside(root, p string) (string, bool) {
	rel, err := filepath.Rel(root, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) {
		return "", false
	}
	return rel, true
}

// readInDir reads p (relative to dir, or absolute inside it) without
// following links.
func readInDir(dir, p string) ([]byte, error) {
	if !filepath.IsAbs(p) {
		p = filepath.Join(dir, p)
	}
	rel, ok := relInside(dir, filepath.Clean(p))
	if !ok || rel == "." {
		return nil, fmt.Errorf("failed to read %s: %w", p, ErrEscapes)
	}
	d, base, err := nofollow.OpenParent(dir, rel, false)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	f, err := nofollow.OpenRegular(d, base, unix.O_RDONLY)
	if err != nil {
		return nil, fmt.Errorf("failed to open %s: %w", p, err)
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTemplateBytes+1))
	if err != nil {
		return nil, fmt.Errorf("failed to read %s: %w", p, err)
	}
	if len(b) > maxTemplateBytes {
		return nil, fmt.Errorf("failed to read %s: larger than %d bytes", p, maxTemplateBytes)
	}
	return b, nil
}

// maxTemplateBytes bounds a template source and a file read by `file`.
const maxTemplateBytes = 4 << 20

// maxRenderBytes bounds a template's output (which may repeat what it
// reads), and so what writeIfChanged compares with the file.
const maxRenderBytes = 16 << 20

// fileSpec is where and how a rendered template is written.
type fileSpec struct {
	root, rel string // the sandbox root and the path below it
	mode      os.FileMode
	uid, gid  int // -1 keeps the agent's
}

func (s fileSpec) path() string { return filepath.Join(s.root, s.rel) }

// writeIfChanged writes data unless the file already holds it (then
// nothing is written); it reports whether the content changed.
// The file is replaced by a rename, so a link at its place is replaced,
// never followed.
func writeIfChanged(s fileSpec, data []byte) (bool, error) {
	d, base, err := nofollow.OpenParent(s.root, s.rel, true)
	if err != nil {
		return false, err
	}
	defer d.Close()
	dfd := int(d.Fd())
	if old, err := readAt(d, base); err == nil && bytes.Equal(old, data) {
		return false, nil
	}
	var suffix [6]byte
	_, _ = rand.Read(suffix[:])
	tmp := "." + base + ".tmp" + hex.EncodeToString(suffix[:])
	fd, err := unix.Openat(dfd, tmp, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o600)
	if err != nil {
		return false, fmt.Errorf("failed to create %s: %w", s.path(), err)
	}
	f := os.NewFile(uintptr(fd), tmp)
	_, err = f.Write(data)
	if err == nil && (s.uid >= 0 || s.gid >= 0) {
		err = f.Chown(s.uid, s.gid)
	}
	if err == nil {
		err = f.Chmod(s.mode)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = unix.Renameat(dfd, tmp, dfd, base)
	}
	if err != nil {
		_ = unix.Unlinkat(dfd, tmp, 0)
		return false, fmt.Errorf("failed to write %s: %w", s.path(), err)
	}
	return true, nil
}

func readAt(dir *os.File, base string) ([]byte, error) {
	f, err := nofollow.OpenRegular(dir, base, unix.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, maxRenderBytes+1))
}
