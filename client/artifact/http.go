package artifact

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"

	"github.com/hashicorp/go-cleanhttp"
	getter "github.com/hashicorp/go-getter/v2"
)

// maxRedirects bounds the redirects one request follows.
const maxRedirects = 10

// ErrRedirect: a redirect to a scheme other than http(s), or too many.
var ErrRedirect = errors.New("artifact redirect refused")

// httpGetter returns go-getter's HTTP getter with meshlet's bounds: the
// response body is limited by an error (not a silent truncation), only
// http(s) redirects are followed, no HEAD probe (so a partial file is never
// resumed) and no X-Terraform-Get indirection.
func (f *Fetcher) httpGetter(headers map[string]string, insecure bool) getter.Getter {
	h := http.Header{}
	for k, v := range headers {
		h.Set(k, v)
	}
	base := cleanhttp.DefaultPooledTransport()
	if insecure {
		base.TLSClientConfig = &tls.Config{InsecureSkipVerify: true} //nolint:gosec // the artifact's insecure = true
	}
	client := &http.Client{
		Transport:     &limitedTransport{base: base, max: f.cfg.MaxDownloadBytes},
		CheckRedirect: checkRedirect,
	}
	return &httpGetter{HttpGetter: &getter.HttpGetter{
		Client:                client,
		Header:                h,
		DoNotCheckHeadFirst:   true,
		ReadTimeout:           f.cfg.Timeout,
		MaxBytes:              f.cfg.MaxDownloadBytes + 1, // the transport errors first
		XTerraformGetDisabled: true,
	}}
}

// httpGetter is go-getter's HTTP getter writing into a fresh file:
// go-getter opens an existing file without truncating it (to resume), so a
// retry over a longer partial file would keep its tail, and a link there
// would be followed.
type httpGetter struct {
	*getter.HttpGetter
}

// ErrNotArchive: a directory fetched from a file that is not an archive.
var ErrNotArchive = errors.New("an artifact fetched as a directory must be an archive")

// Get implements getter.Getter for directories: over http(s) only an
// archive (unpacked through GetFile) makes one. go-getter would otherwise
// succeed without fetching anything, its X-Terraform-Get indirection
// being off.
func (g *httpGetter) Get(_ context.Context, req *getter.Request) error {
	return fmt.Errorf("%w: %s", ErrNotArchive, req.URL().Redacted())
}

// GetFile implements getter.Getter.
func (g *httpGetter) GetFile(ctx context.Context, req *getter.Request) error {
	if fi, err := os.Lstat(req.Dst); err == nil && !fi.IsDir() {
		if err := os.Remove(req.Dst); err != nil {
			return fmt.Errorf("failed to replace %s: %w", req.Dst, err)
		}
	}
	return g.HttpGetter.GetFile(ctx, req)
}

func checkRedirect(req *http.Request, via []*http.Request) error {
	if s := req.URL.Scheme; s != "http" && s != "https" {
		return fmt.Errorf("%w: to scheme %q", ErrRedirect, s)
	}
	if len(via) >= maxRedirects {
		return fmt.Errorf("%w: stopped after %d redirects", ErrRedirect, maxRedirects)
	}
	return nil
}

// limitedTransport fails responses whose body is over max bytes.
type limitedTransport struct {
	base *http.Transport
	max  int64
}

func (t *limitedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if resp.ContentLength > t.max {
		resp.Body.Close()
		return nil, fmt.Errorf("%w: %s is %d bytes, the limit is %d", ErrTooLarge, req.URL.Redacted(), resp.ContentLength, t.max)
	}
	resp.Body = &limitedBody{rc: resp.Body, left: t.max, max: t.max}
	return resp, nil
}

// limitedBody reads at most max bytes, then fails with ErrTooLarge.
type limitedBody struct {
	rc   io.ReadCloser
	left int64
	max  int64
}

func (b *limitedBody) Read(p []byte) (int, error) {
	if b.left <= 0 {
		// One byte more tells a body of exactly max bytes from a longer one.
		var one [1]byte
		n, err := b.rc.Read(one[:])
		if n > 0 {
			return 0, fmt.Errorf("%w: the response body is over %d bytes", ErrTooLarge, b.max)
		}
		return 0, err
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *limitedBody) Close() error { return b.rc.Close() }
