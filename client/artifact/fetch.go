// Package artifact fetches a task's Nomad artifact blocks into its task
// directory before the task starts (Fetcher), and runs as the task
// runner's prestart hook (Hook) that emits Nomad's "Downloading Artifacts"
// and "Failed Artifact Download" events.
//
// Fetching uses hashicorp/go-getter/v2 with only two getters registered,
// as Nomad configures its client: http(s) and local files. go-getter's
// conventions hold: options become URL query parameters (checksum =
// "type:value" is verified, archive = false keeps an archive packed), and
// tar.gz, tgz, zip, gz, tar.bz2, tbz2, tar.xz, txz and tar sources are
// unpacked. go-getter v1 was not used: its getter package registers the
// S3 and GCS getters and so links the AWS and Google Cloud SDKs into the
// agent; v2 keeps those in separate modules. v2.2.6 needs a newer Go
// toolchain than the module's, so v2.2.5 is pinned.
//
// What the fetcher adds around go-getter:
//   - the destination must stay inside the task dir, and no existing part
//     of its path may be a symbolic link (a task cannot redirect the
//     agent's writes);
//   - HTTP responses are bounded (Config.MaxDownloadBytes, an error rather
//     than a truncated file), redirects are followed only to http and
//     https (at most 10), go-getter's X-Terraform-Get indirection is off,
//     and every artifact has a deadline (Config.Timeout);
//   - archives are bounded in files and expanded bytes; go-getter never
//     creates links from an archive (a link entry becomes an empty file),
//     so nothing unpacked can point outside the destination;
//   - local sources (a path relative to the task dir, or file://) must
//     resolve, links followed, inside Request.FileRoots (the hook gives
//     the task's dir and the shared alloc/ dir): a jobspec cannot copy the
//     agent's files or a sibling task's secrets. The check is made on the
//     opened file, and local directories are refused (go-getter would
//     link them, not copy).
//
// Concurrency: a Fetcher is immutable after New and safe for concurrent
// use; each Fetch builds its own go-getter client.
package artifact

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	getter "github.com/hashicorp/go-getter/v2"

	"github.com/meshlet/meshlet/structs"
)

// Defaults of Config.
const (
	DefaultMaxDownloadBytes = 1 << 30
	DefaultMaxExpandedBytes = 4 << 30
	DefaultMaxFiles         = 4096
	DefaultTimeout          = 30 * time.Minute
)

// Errors a Fetch wraps.
var (
	// ErrDestEscapes: the destination leaves the task dir.
	ErrDestEscapes = errors.New("artifact destination escapes the task directory")
	// ErrSymlink: a symbolic link sits on the destination's path.
	ErrSymlink = errors.New("artifact destination path contains a symbolic link")
	// ErrTooLarge: a download or an unpacked archive is over its limit.
	ErrTooLarge = errors.New("artifact is over the size limit")
	// ErrChecksumMismatch: the fetched file does not have its checksum.
	ErrChecksumMismatch = errors.New("checksums did not match")
	// ErrSourceNotAllowed: a local source outside the allowed roots.
	ErrSourceNotAllowed = errors.New("local artifact source is outside the allocation directory")
	// ErrInvalidMode: a mode other than any, file and dir.
	ErrInvalidMode = errors.New("invalid artifact mode")
)

// Config bounds what a Fetcher downloads; a zero field means its default.
type Config struct {
	// MaxDownloadBytes bounds one HTTP response body.
	MaxDownloadBytes int64
	// MaxExpandedBytes bounds what one archive unpacks to; MaxFiles how
	// many entries it may have.
	MaxExpandedBytes int64
	MaxFiles         int
	// Timeout bounds one artifact's fetch, download and unpacking.
	Timeout time.Duration
}

func (c Config) withDefaults() Config {
	if c.MaxDownloadBytes <= 0 {
		c.MaxDownloadBytes = DefaultMaxDownloadBytes
	}
	if c.MaxExpandedBytes <= 0 {
		c.MaxExpandedBytes = DefaultMaxExpandedBytes
	}
	if c.MaxFiles <= 0 {
		c.MaxFiles = DefaultMaxFiles
	}
	if c.Timeout <= 0 {
		c.Timeout = DefaultTimeout
	}
	return c
}

// Fetcher downloads artifacts.
type Fetcher struct {
	cfg           Config
	decompressors map[string]getter.Decompressor
}

// New returns a Fetcher bounded by cfg.
func New(cfg Config) *Fetcher {
	cfg = cfg.withDefaults()
	return &Fetcher{cfg: cfg, decompressors: decompressors(cfg.MaxFiles, cfg.MaxExpandedBytes)}
}

// Request is one artifact to fetch, its values already interpolated.
type Request struct {
	Source  string
	Options map[string]string
	Headers map[string]string
	// Mode is any (""), file or dir.
	Mode string
	// TaskDir is the task's directory; Dest is relative to it, and so are
	// relative local sources.
	TaskDir string
	Dest    string
	// FileRoots are the directories local sources may be read from.
	FileRoots []string
	// Insecure skips TLS certificate verification.
	Insecure bool
}

// Fetch downloads req.Source into req.Dest.
func (f *Fetcher) Fetch(ctx context.Context, req Request) error {
	mode, err := getterMode(req.Mode)
	if err != nil {
		return err
	}
	dst, err := safeDest(req.TaskDir, req.Dest)
	if err != nil {
		return err
	}
	src, err := sourceWithOptions(req.Source, req.Options)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, f.cfg.Timeout)
	defer cancel()
	client := &getter.Client{
		Getters: []getter.Getter{
			f.httpGetter(req.Headers, req.Insecure),
			&fileGetter{roots: req.FileRoots, max: f.cfg.MaxDownloadBytes},
		},
		Decompressors:   f.decompressors,
		DisableSymlinks: true,
	}
	_, err = client.Get(ctx, &getter.Request{Src: src, Dst: dst, Pwd: req.TaskDir, GetMode: mode,
		Copy: true, DisableSymlinks: true, Umask: 0o022})
	return classify(err)
}

// classify wraps go-getter's errors in this package's sentinels.
func classify(err error) error {
	var cerr *getter.ChecksumError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &cerr):
		return fmt.Errorf("%w: expected %x, got %x", ErrChecksumMismatch, cerr.Expected, cerr.Actual)
	case errors.Is(err, getter.ErrSymlinkCopy):
		return fmt.Errorf("%w: %w", ErrSymlink, err)
	case errors.Is(err, ErrTooLarge) || errors.Is(err, ErrSourceNotAllowed):
		return err
	case strings.Contains(err.Error(), "larger than limit") || strings.Contains(err.Error(), "too many files"):
		// go-getter's decompressors return plain errors.
		return fmt.Errorf("%w: %w", ErrTooLarge, err)
	}
	return err
}

func getterMode(m string) (getter.Mode, error) {
	switch m {
	case "", structs.ArtifactModeAny:
		return getter.ModeAny, nil
	case structs.ArtifactModeFile:
		return getter.ModeFile, nil
	case structs.ArtifactModeDir:
		return getter.ModeDir, nil
	}
	return 0, fmt.Errorf("%w %q; must be one of: any, file, dir", ErrInvalidMode, m)
}

// safeDest returns dest joined to taskDir (a leading "/" counts as
// relative, as in Nomad) after checking it stays inside and that no
// existing element below taskDir is a symbolic link.
func safeDest(taskDir, dest string) (string, error) {
	rel := filepath.Clean(strings.TrimLeft(dest, "/"))
	if rel == ".." || strings.HasPrefix(rel, "../") {
		return "", fmt.Errorf("%w: %q", ErrDestEscapes, dest)
	}
	p := taskDir
	for _, elem := range strings.Split(rel, "/") {
		if elem == "." {
			continue
		}
		p = filepath.Join(p, elem)
		fi, err := os.Lstat(p)
		if errors.Is(err, os.ErrNotExist) {
			break
		}
		if err != nil {
			return "", fmt.Errorf("failed to check artifact destination: %w", err)
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			return "", fmt.Errorf("%w: %s", ErrSymlink, p)
		}
	}
	return filepath.Join(taskDir, rel), nil
}

// sourceWithOptions appends options to the source's query, as Nomad does:
// go-getter reads checksum, archive and filename from there.
func sourceWithOptions(src string, opts map[string]string) (string, error) {
	if len(opts) == 0 {
		return src, nil
	}
	u, err := url.Parse(src)
	if err != nil {
		return "", fmt.Errorf("failed to parse artifact source %q: %w", src, err)
	}
	q := u.Query()
	keys := make([]string, 0, len(opts))
	for k := range opts {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		q.Set(k, opts[k])
	}
	u.RawQuery = q.Encode()
	return u.String(), nil
}
