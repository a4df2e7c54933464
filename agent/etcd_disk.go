package agent

import (
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/meshlet/meshlet/internal/etcdembed"
)

// dbHeadroom is how far past its use the embedded member's database file
// is kept allocated on disk. etcd commits its writes to the database in
// the background (every 100 ms) and stops the whole process when one of
// those writes fails; with the blocks already allocated, a disk that fills
// up after a write was accepted cannot fail its commit. Writes stop being
// accepted below minFreeDisk (memberDiskCheck), long before the headroom
// is used up.
const dbHeadroom = 8 << 20

// headroomInterval is how often the headroom is topped up.
const headroomInterval = 2 * time.Second

// keepHeadroom allocates the member's database file dbHeadroom past its
// use now, then keeps it so until the member stops.
func (a *Agent) keepHeadroom(m *etcdembed.Member) {
	topUp := func() {
		if err := allocateHeadroom(m.DBPath(), m.BackendSize()); err != nil {
			a.logger.Debug("failed to preallocate the etcd database", "error", err)
		}
	}
	topUp()
	go func() {
		t := time.NewTicker(headroomInterval)
		defer t.Stop()
		for {
			select {
			case <-m.Done():
				return
			case <-t.C:
				topUp()
			}
		}
	}()
}

// allocateHeadroom makes path at least used+dbHeadroom bytes long with
// real blocks (fallocate), never shrinking it.
func allocateHeadroom(path string, used int64) error {
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return err
	}
	want := used + dbHeadroom
	if fi.Size() >= want && allocated(fi) >= want {
		return nil
	}
	return unix.Fallocate(int(f.Fd()), 0, 0, want)
}

// allocated is how many bytes of the file have disk blocks.
func allocated(fi os.FileInfo) int64 {
	if st, ok := fi.Sys().(*unix.Stat_t); ok {
		return st.Blocks * 512
	}
	return 0
}
