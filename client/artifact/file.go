package artifact

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"

	getter "github.com/hashicorp/go-getter/v2"
)

// fileGetter is go-getter's file getter confined to roots: a source must
// resolve (links followed) to a regular file inside one of them.
// Directories are refused: go-getter links them instead of copying.
type fileGetter struct {
	getter.FileGetter
	roots []string
}

// Get implements getter.Getter for directory sources.
func (g *fileGetter) Get(_ context.Context, req *getter.Request) error {
	if _, err := g.confine(req.URL()); err != nil {
		return err
	}
	return fmt.Errorf("local artifact source %s is a directory; use an archive or mode = \"file\"", localPath(req.URL()))
}

// GetFile implements getter.Getter: it copies the confined file.
func (g *fileGetter) GetFile(ctx context.Context, req *getter.Request) error {
	if _, err := g.confine(req.URL()); err != nil {
		return err
	}
	req.Copy = true
	return g.FileGetter.GetFile(ctx, req)
}

// Mode implements getter.Getter.
func (g *fileGetter) Mode(ctx context.Context, u *url.URL) (getter.Mode, error) {
	if _, err := g.confine(u); err != nil {
		return 0, err
	}
	return g.FileGetter.Mode(ctx, u)
}

func localPath(u *url.URL) string {
	if u.RawPath != "" {
		return u.RawPath
	}
	return u.Path
}

// confine resolves the source and checks it lies inside a root.
func (g *fileGetter) confine(u *url.URL) (string, error) {
	p := localPath(u)
	real, err := filepath.EvalSymlinks(p)
	if err != nil {
		return "", fmt.Errorf("failed to resolve local artifact source %s: %w", p, err)
	}
	for _, root := range g.roots {
		r, err := filepath.EvalSymlinks(root)
		if err != nil {
			continue
		}
		if real == r || strings.HasPrefix(real, r+string(filepath.Separator)) {
			return real, nil
		}
	}
	return "", fmt.Errorf("%w: %s", ErrSourceNotAllowed, p)
}
