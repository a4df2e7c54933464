// Package boltsafe opens meshlet's bbolt files so that damage and contention
// become one-line errors, never a panic or a hang: an existing file is first
// walked page by page read-only (a panic while a writable open loads a
// corrupt freelist would leave the file mapped and locked), bbolt's panics on
// bad pages are recovered, and the file lock is taken with a timeout.
//
// Each store keeps its own sentinels and recovery hints through Files.
package boltsafe

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	bolt "go.etcd.io/bbolt"
	berrors "go.etcd.io/bbolt/errors"

	"github.com/meshlet/meshlet/internal/atomicfile"
)

// Files opens the bbolt files of one store. Corrupt wraps the cause of
// damage at path into the store's error (with how to recover); Locked says
// that another process holds path. Both are required.
type Files struct {
	Corrupt func(path string, cause error) error
	Locked  func(path string) error
}

// Open checks an existing, non-empty file with bbolt's own page check and
// opens it (or creates it, see create) for writing, waiting at most
// timeout for the file lock.
func (f Files) Open(path string, timeout time.Duration) (*bolt.DB, error) {
	fi, err := os.Stat(path)
	switch {
	case err == nil && fi.Size() > 0:
		if err := f.check(path, timeout); err != nil {
			return nil, err
		}
	case errors.Is(err, fs.ErrNotExist):
		if err := f.create(path, timeout); err != nil {
			return nil, err
		}
	}
	return f.open(path, &bolt.Options{Timeout: timeout})
}

// create makes a new, initialised file at path. bbolt writes a new file's
// first pages after creating it, so a full disk or a crash in between
// would leave an empty or torn file that the next start takes for lost or
// corrupt state: the pages go to a temp file that is linked into place
// only once complete (and removed in any case). A path another process
// created meanwhile is left as it is.
func (f Files) create(path string, timeout time.Duration) error {
	dir := filepath.Dir(path)
	tf, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(path)+"-*")
	if err != nil {
		return fmt.Errorf("failed to create %s: %w", path, err)
	}
	tmp := tf.Name()
	defer func() { _ = os.Remove(tmp) }()
	if err := tf.Close(); err != nil {
		return fmt.Errorf("failed to create %s: %w", path, err)
	}
	db, err := bolt.Open(tmp, 0o600, &bolt.Options{Timeout: timeout})
	if err != nil {
		return fmt.Errorf("failed to create %s: %w", path, err)
	}
	if err := db.Close(); err != nil {
		return fmt.Errorf("failed to create %s: %w", path, err)
	}
	if err := os.Link(tmp, path); err != nil && !errors.Is(err, fs.ErrExist) {
		return fmt.Errorf("failed to create %s: %w", path, err)
	}
	return atomicfile.SyncDir(dir)
}

// Walk reads every key and value of an existing, non-empty file
// read-only, in this goroutine (for a file another program opens
// afterwards, such as etcd's database). Unlike bbolt's own check it does
// not rebuild the freelist of a file that does not sync it, which bbolt
// does in a goroutine whose panic on a bad page no recover can catch.
func (f Files) Walk(path string, timeout time.Duration) error {
	if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
		return nil
	}
	return f.inspect(path, timeout, func(tx *bolt.Tx) error {
		return tx.ForEach(func(_ []byte, b *bolt.Bucket) error { return walkBucket(b) })
	})
}

func walkBucket(b *bolt.Bucket) error {
	return b.ForEach(func(k, v []byte) error {
		if v == nil {
			if child := b.Bucket(k); child != nil {
				return walkBucket(child)
			}
		}
		return nil
	})
}

// Recover turns a bbolt panic (a corrupt page met by a read or a write)
// into the store's corruption error in *err. Use it directly in a defer.
func (f Files) Recover(path string, err *error) {
	if r := recover(); r != nil {
		*err = f.Corrupt(path, errors.New(oneLine(fmt.Sprint(r))))
	}
}

// check walks every page once, so that a damaged file is refused at start,
// not at the first read of a bad page.
func (f Files) check(path string, timeout time.Duration) error {
	return f.inspect(path, timeout, func(tx *bolt.Tx) error {
		for err := range tx.Check() {
			if err != nil {
				return f.Corrupt(path, errors.New(oneLine(err.Error())))
			}
		}
		return nil
	})
}

// inspect runs fn in a read transaction of path opened read-only, with
// bbolt's panics on bad pages turned into Corrupt errors.
func (f Files) inspect(path string, timeout time.Duration, fn func(tx *bolt.Tx) error) (err error) {
	db, err := f.open(path, &bolt.Options{Timeout: timeout, ReadOnly: true})
	if err != nil {
		return err
	}
	defer func() {
		if cerr := db.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("failed to close %s after checking it: %w", path, cerr)
		}
	}()
	defer f.Recover(path, &err)
	return db.View(fn)
}

func (f Files) open(path string, opts *bolt.Options) (db *bolt.DB, err error) {
	defer f.Recover(path, &err)
	db, err = bolt.Open(path, 0o600, opts)
	switch {
	case errors.Is(err, berrors.ErrTimeout):
		return nil, f.Locked(path)
	case errors.Is(err, berrors.ErrInvalid), errors.Is(err, berrors.ErrChecksum), errors.Is(err, berrors.ErrVersionMismatch),
		tooSmall(err):
		return nil, f.Corrupt(path, err)
	case err != nil:
		return nil, fmt.Errorf("failed to open %s: %w", path, err)
	}
	return db, nil
}

// tooSmall reports bbolt's refusal of a file shorter than its two meta
// pages (a file cut short), an error bbolt gives no sentinel for.
func tooSmall(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "file size too small")
}

func oneLine(s string) string { return strings.ReplaceAll(s, "\n", " ") }
