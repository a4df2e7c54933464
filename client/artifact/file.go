package artifact

import (
	"context"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	getter "github.com/hashicorp/go-getter/v2"
)

// fileGetter is go-getter's file getter confined to roots: a source must
// be a regular file inside one of them. The check is made on the opened
// file (its path as the kernel resolved it), so a link swapped in after
// the check cannot redirect the copy. Directories are refused: go-getter
// links them instead of copying.
type fileGetter struct {
	getter.FileGetter
	roots []string
	// max bounds the copy, as MaxDownloadBytes bounds a download.
	max int64
}

// Get implements getter.Getter for directory sources.
func (g *fileGetter) Get(_ context.Context, req *getter.Request) error {
	f, err := g.open(localPath(req.URL()))
	if err != nil {
		return err
	}
	defer f.Close()
	if fi, err := f.Stat(); err == nil && !fi.IsDir() {
		return fmt.Errorf("%w: %s", ErrNotArchive, localPath(req.URL()))
	}
	return fmt.Errorf("local artifact source %s is a directory; use an archive", localPath(req.URL()))
}

// Mode implements getter.Getter.
func (g *fileGetter) Mode(_ context.Context, u *url.URL) (getter.Mode, error) {
	f, err := g.open(localPath(u))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return 0, fmt.Errorf("failed to stat local artifact source: %w", err)
	}
	if fi.IsDir() {
		return getter.ModeDir, nil
	}
	return getter.ModeFile, nil
}

// GetFile implements getter.Getter: it copies the confined file into a
// new file at req.Dst (whatever was there is replaced, never followed).
func (g *fileGetter) GetFile(ctx context.Context, req *getter.Request) error {
	src, err := g.open(localPath(req.URL()))
	if err != nil {
		return err
	}
	defer src.Close()
	if fi, err := src.Stat(); err != nil || !fi.Mode().IsRegular() {
		return fmt.Errorf("local artifact source %s is not a regular file", src.Name())
	}
	if fi, err := os.Lstat(req.Dst); err == nil && !fi.IsDir() {
		if err := os.Remove(req.Dst); err != nil {
			return fmt.Errorf("failed to replace %s: %w", req.Dst, err)
		}
	}
	if err := os.MkdirAll(filepath.Dir(req.Dst), 0o755); err != nil {
		return fmt.Errorf("failed to create %s: %w", filepath.Dir(req.Dst), err)
	}
	dst, err := os.OpenFile(req.Dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, req.Mode(0o666))
	if err != nil {
		return fmt.Errorf("failed to create %s: %w", req.Dst, err)
	}
	n, err := getter.Copy(ctx, dst, io.LimitReader(src, g.max+1))
	if cerr := dst.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > g.max {
		err = fmt.Errorf("%w: %s is over %d bytes", ErrTooLarge, src.Name(), g.max)
	}
	if err != nil {
		_ = os.Remove(req.Dst)
		return fmt.Errorf("failed to copy %s: %w", src.Name(), err)
	}
	return nil
}

func localPath(u *url.URL) string {
	if u.RawPath != "" {
		return u.RawPath
	}
	return u.Path
}

// open opens p (links followed) and checks that the file it got lies
// inside a root.
func (g *fileGetter) open(p string) (*os.File, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		return nil, fmt.Errorf("failed to open local artifact source: %w", err)
	}
	real, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("failed to resolve local artifact source %s: %w", p, err)
	}
	for _, root := range g.roots {
		r, err := filepath.EvalSymlinks(root)
		if err != nil {
			continue
		}
		if real == r || strings.HasPrefix(real, r+string(filepath.Separator)) {
			return f, nil
		}
	}
	f.Close()
	return nil, fmt.Errorf("%w: %s", ErrSourceNotAllowed, p)
}
