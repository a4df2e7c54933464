package meshstate

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Sentinel errors of Store; test with errors.Is.
var (
	// ErrInvalid: the request was rejected before etcd saw it (an empty
	// or unsafe ID, an instance of another node or allocation).
	ErrInvalid = errors.New("invalid mesh state request")
	// ErrConflict: a compare-and-swap write lost the race against other
	// servers' writes too many times in a row.
	ErrConflict = errors.New("mesh state write conflict")
)

// Key layout under the prefix (see the package documentation).
const (
	catalogDir    = "catalog/"
	intentionsKey = "intentions"
	caDir         = "ca/"
	caRootsKey    = "ca/roots"
	caKeysDir     = "ca/keys/"
)

// maxSegment is the longest node, allocation or root ID used in a key.
const maxSegment = 128

// maxWriteTries bounds how often a compare-and-swap write that lost a race
// is run again before it fails with ErrConflict.
const maxWriteTries = 16

// Store keeps the mesh's cluster-wide state under one key prefix of an
// etcd cluster: catalog registrations, intentions and the CA (see the
// package documentation for the layout).
//
// Concurrency: a Store is safe for concurrent use, and several Stores (of
// one server or of several) may share a prefix: the intentions and the CA
// are written with compare-and-swap on their key's revision, and each
// catalog key has one writer (the node that runs the allocation; the
// servers when the node is down).
type Store struct {
	c       *clientv3.Client
	prefix  string
	timeout time.Duration
	logger  hclog.Logger
	now     func() time.Time
	disk    func() error
	// externalChecked, when set, runs between PutExternal's ID check and
	// its write (a test seam for the race between two registrations).
	externalChecked func()
}

// Open returns the store kept under opts.Prefix of the cluster c talks to.
// It does no I/O; the caller owns c and closes it after the last call.
func Open(c *clientv3.Client, opts Options) *Store {
	opts = opts.withDefaults()
	return &Store{c: c, prefix: opts.Prefix, timeout: opts.RequestTimeout,
		logger: opts.Logger.Named("meshstate"), now: opts.Now, disk: opts.DiskCheck}
}

// writable runs the disk check before a write.
func (s *Store) writable(what string) error {
	if s.disk == nil {
		return nil
	}
	if err := s.disk(); err != nil {
		return fmt.Errorf("failed to %s: %w", what, err)
	}
	return nil
}

// Prefix is the key prefix of the store, ending in "/".
func (s *Store) Prefix() string { return s.prefix }

// callCtx bounds one etcd call.
func (s *Store) callCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.timeout)
}

// key is the full key of sub.
func (s *Store) key(sub string) string { return s.prefix + sub }

// checkSegment rejects IDs that cannot be one segment of a key.
func checkSegment(what, id string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty %s", ErrInvalid, what)
	case len(id) > maxSegment:
		return fmt.Errorf("%w: %s %.20q... longer than %d bytes", ErrInvalid, what, id, maxSegment)
	case strings.ContainsRune(id, '/'):
		return fmt.Errorf("%w: %s %q contains '/'", ErrInvalid, what, id)
	}
	return nil
}

// retryWait sleeps before try (try > 0) of a write that lost a race, with
// jitter so racing writers spread out; false when ctx ended.
func retryWait(ctx context.Context, try int) bool {
	if try == 0 {
		return true
	}
	d := rand.N(min(time.Millisecond<<try, 100*time.Millisecond)) + time.Millisecond
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// rangeEnd is the end of the range holding every key starting with p.
func rangeEnd(p string) string { return clientv3.GetPrefixRangeEnd(p) }
