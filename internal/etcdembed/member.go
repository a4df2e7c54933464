package etcdembed

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.etcd.io/etcd/server/v3/storage/wal"
	"golang.org/x/sys/unix"
)

// ErrLocked is returned by Start when another member (in this process or
// another) holds the data dir.
var ErrLocked = errors.New("etcd data dir is held by another member")

// lockFileName is the file in the data dir a member holds a flock on.
const lockFileName = "meshlet-etcd.lock"

var walSegmentOnce sync.Once

// Member is a running embedded etcd member.
type Member struct {
	name   string
	etcd   *embed.Etcd
	client *clientv3.Client
	lock   *os.File
	log    hclog.Logger

	closing *atomic.Bool // set before etcd is closed; quiets its logger

	closeOnce sync.Once
	closeErr  error
}

// Start starts a member and waits until it is ready to serve (it joined
// its cluster and a leader is known) and, if it joined as a learner (see
// AddMember), was promoted to a voting member; or until ctx ends or
// cfg.StartTimeout passes.
// On failure the member is stopped, its goroutines have ended and the data
// dir's lock is released.
func Start(ctx context.Context, cfg Config) (*Member, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	closing := new(atomic.Bool)
	ec, err := cfg.embedConfig(closing)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("failed to create etcd data dir: %w", err)
	}
	lock, err := lockDataDir(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	walSegmentOnce.Do(func() { wal.SegmentSizeBytes = WALSegmentBytes })

	e, err := embed.StartEtcd(ec) // closes what it started on error
	if err != nil {
		unlockDataDir(lock)
		return nil, fmt.Errorf("failed to start etcd member %q: %w", cfg.Name, err)
	}
	m := &Member{name: cfg.Name, etcd: e, lock: lock, closing: closing, log: cfg.Logger.Named("etcd")}
	ctx, cancel := context.WithTimeout(ctx, cfg.StartTimeout)
	defer cancel()
	if err := waitReady(ctx, e, cfg); err != nil {
		m.Close()
		return nil, err
	}
	m.client = v3client.New(e.Server)
	if e.Server.IsLearner() {
		if err := promote(ctx, m.client, m.ID()); err != nil {
			m.Close()
			return nil, fmt.Errorf("etcd member %q joined as a learner: %w", cfg.Name, err)
		}
	}
	return m, nil
}

func waitReady(ctx context.Context, e *embed.Etcd, cfg Config) error {
	select {
	case <-e.Server.ReadyNotify():
		return nil
	case err := <-e.Err():
		return fmt.Errorf("etcd member %q failed before it was ready: %w", cfg.Name, err)
	case <-e.Server.StopNotify():
		return fmt.Errorf("etcd member %q stopped before it was ready", cfg.Name)
	case <-ctx.Done():
		return fmt.Errorf("etcd member %q not ready (cluster %q, state %s): %w", cfg.Name, cfg.InitialCluster, cfg.ClusterState, ctx.Err())
	}
}

// Client is an in-process client of this member: its calls go to the
// member's gRPC services by function call, not through a socket, and TLS
// does not apply. Close closes it; callers must not.
func (m *Member) Client() *clientv3.Client { return m.client }

// ClientURLs are the client URLs the member advertises.
func (m *Member) ClientURLs() []string { return joinURLs(m.etcd.Config().AdvertiseClientUrls) }

// PeerURLs are the peer URLs the member advertises.
func (m *Member) PeerURLs() []string { return joinURLs(m.etcd.Config().AdvertisePeerUrls) }

// Name is the member's name.
func (m *Member) Name() string { return m.name }

// ID is the member's raft ID.
func (m *Member) ID() uint64 { return uint64(m.etcd.Server.MemberID()) }

// IsLeader reports whether this member is the raft leader.
func (m *Member) IsLeader() bool {
	s := m.etcd.Server
	return s.Leader() == s.MemberID()
}

// Done is closed when the member stopped, by Close or on its own (for
// example after it was removed from its cluster).
func (m *Member) Done() <-chan struct{} { return m.etcd.Server.StopNotify() }

// Err reports errors of the member's servers while it runs; it is closed
// by Close.
func (m *Member) Err() <-chan error { return m.etcd.Err() }

// Close stops the member: its in-process client first, then etcd, then the
// data dir's lock. It is safe to call more than once and concurrently.
func (m *Member) Close() error {
	m.closeOnce.Do(func() {
		if m.client != nil {
			if err := m.client.Close(); err != nil && !errors.Is(err, context.Canceled) {
				m.log.Debug("failed to close in-process client", "error", err)
			}
		}
		m.closing.Store(true)
		select {
		case <-m.etcd.Server.ReadyNotify():
		default:
			// etcd's Close waits for its client servers, which wait for the
			// member to be ready or stopping: stop it first, or Close of a
			// member that never became ready blocks forever.
			m.etcd.Server.Stop()
		}
		m.etcd.Close()
		m.closeErr = unlockDataDir(m.lock)
	})
	return m.closeErr
}

// lockDataDir takes an exclusive flock on the data dir's lock file and
// records this process's ID in it.
func lockDataDir(dir string) (*os.File, error) {
	path := filepath.Join(dir, lockFileName)
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
	if err != nil {
		return nil, fmt.Errorf("failed to open etcd lock file: %w", err)
	}
	if err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); err != nil {
		holder, _ := os.ReadFile(path)
		f.Close()
		if errors.Is(err, unix.EWOULDBLOCK) {
			return nil, fmt.Errorf("%w: %s (pid %s)", ErrLocked, dir, orDefault(strings.TrimSpace(string(holder)), "unknown"))
		}
		return nil, fmt.Errorf("failed to lock %s: %w", path, err)
	}
	if err := f.Truncate(0); err == nil {
		_, _ = f.WriteAt([]byte(strconv.Itoa(os.Getpid())+"\n"), 0)
	}
	return f, nil
}

// unlockDataDir releases the lock by closing the file. The file stays: a
// flock, unlike a pid file, cannot go stale.
func unlockDataDir(f *os.File) error {
	if err := f.Close(); err != nil {
		return fmt.Errorf("failed to release etcd data dir lock: %w", err)
	}
	return nil
}

// BackendSize is how much of the member's database file bbolt has used
// (its high-water mark): writes below it need no new disk blocks.
func (m *Member) BackendSize() int64 { return m.etcd.Server.Backend().Size() }

// DBPath is the member's database file.
func (m *Member) DBPath() string {
	return filepath.Join(m.etcd.Config().Dir, "member", "snap", "db")
}
