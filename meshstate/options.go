package meshstate

import (
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
)

// DefaultPrefix is where a Store keeps its keys by default.
const DefaultPrefix = "/meshlet/connect/"

// DefaultRequestTimeout bounds each etcd call when Options.RequestTimeout
// is zero.
const DefaultRequestTimeout = 10 * time.Second

// Options tune a Store; zero fields take their defaults.
type Options struct {
	// Prefix of every key; default DefaultPrefix. A missing trailing "/"
	// is added.
	Prefix string
	// RequestTimeout bounds each etcd call (each try of a retried
	// write); default DefaultRequestTimeout.
	RequestTimeout time.Duration
	// Logger defaults to a null logger; the Store logs under "meshstate".
	Logger hclog.Logger
	// Now stamps intentions' CreatedAt and UpdatedAt; default time.Now.
	Now func() time.Time
	// DiskCheck, when set, runs before every write; its error fails the
	// write before etcd sees it (an embedded member stops the process when
	// its disk fills, see state.EtcdOptions.DiskCheck).
	DiskCheck func() error
}

// withDefaults returns opts with its defaults filled in.
func (opts Options) withDefaults() Options {
	if opts.Prefix == "" {
		opts.Prefix = DefaultPrefix
	}
	if !strings.HasSuffix(opts.Prefix, "/") {
		opts.Prefix += "/"
	}
	if opts.RequestTimeout <= 0 {
		opts.RequestTimeout = DefaultRequestTimeout
	}
	if opts.Logger == nil {
		opts.Logger = hclog.NewNullLogger()
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	return opts
}
