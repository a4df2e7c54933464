package docker

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sync"
	"time"

	cerrdefs "github.com/containerd/errdefs"
	"github.com/docker/docker/api/types/container"
	"github.com/docker/docker/api/types/image"
	"github.com/docker/docker/client"
	"golang.org/x/sys/unix"
)

// The pause container gives docker a handle on an allocation's network
// namespace. Docker cannot join a namespace by path, only another
// container's ("container:<id>", which it resolves to
// /proc/<pid>/ns/net of that container's first process). So, per
// allocation with its own namespace (bridge or cni/*), the driver starts a
// pause container whose only process moves itself into the allocation's
// namespace (setns on the namespace file, bound read-only at /netns) and
// then sleeps; the allocation's docker tasks join it. The namespace stays
// meshlet's (CNI set it up, exec and raw_exec tasks enter it by path); the
// pause container only points at it.
//
// The pause program is a 66-byte x86-64 Linux program (no libc, no other
// file), so the image is built locally from this package alone: no
// registry is needed.

// LabelPause marks pause containers.
const LabelPause = "com.meshlet.pause"

// pauseWait bounds the wait for a started pause container to be in the
// allocation's namespace.
const pauseWait = 10 * time.Second

// ErrPause wraps failures to make an allocation's pause container.
var ErrPause = errors.New("failed to set up the allocation's pause container")

// pauseCode is the x86-64 machine code of the pause program:
//
//	mov eax, 2 ; lea rdi, [rip+path] ; xor esi, esi ; syscall   // open("/netns", O_RDONLY)
//	test eax, eax ; js fail
//	mov edi, eax ; mov esi, CLONE_NEWNET ; mov eax, 308 ; syscall // setns(fd, CLONE_NEWNET)
//	test eax, eax ; jnz fail
//	loop: mov eax, 34 ; syscall ; jmp loop                       // pause()
//	fail: mov edi, 1 ; mov eax, 60 ; syscall                      // exit(1)
//	path: "/netns\0"
var pauseCode = []byte{
	0xb8, 0x02, 0x00, 0x00, 0x00,
	0x48, 0x8d, 0x3d, 0x2f, 0x00, 0x00, 0x00,
	0x31, 0xf6,
	0x0f, 0x05,
	0x85, 0xc0,
	0x78, 0x1b,
	0x89, 0xc7,
	0xbe, 0x00, 0x00, 0x00, 0x40,
	0xb8, 0x34, 0x01, 0x00, 0x00,
	0x0f, 0x05,
	0x85, 0xc0,
	0x75, 0x09,
	0xb8, 0x22, 0x00, 0x00, 0x00,
	0x0f, 0x05,
	0xeb, 0xf7,
	0xbf, 0x01, 0x00, 0x00, 0x00,
	0xb8, 0x3c, 0x00, 0x00, 0x00,
	0x0f, 0x05,
	'/', 'n', 'e', 't', 'n', 's', 0,
}

// pauseELF wraps pauseCode in a minimal static ELF64 executable: the
// header, one PT_LOAD segment mapping the whole file at 0x400000, the code.
func pauseELF() []byte {
	const (
		base    = 0x400000
		ehSize  = 64
		phSize  = 56
		codeOff = ehSize + phSize
	)
	size := uint64(codeOff + len(pauseCode))
	var b bytes.Buffer
	le := binary.LittleEndian
	b.Write([]byte{0x7f, 'E', 'L', 'F', 2, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0, 0}) // ELF64, little endian, SysV
	for _, v := range []any{
		uint16(2), uint16(62), uint32(1), // ET_EXEC, EM_X86_64, version
		uint64(base + codeOff), uint64(ehSize), uint64(0), // entry, phoff, shoff
		uint32(0), uint16(ehSize), uint16(phSize), uint16(1), // flags, ehsize, phentsize, phnum
		uint16(0), uint16(0), uint16(0), // shentsize, shnum, shstrndx
		uint32(1), uint32(5), uint64(0), // PT_LOAD, PF_R|PF_X, offset
		uint64(base), uint64(base), size, size, uint64(0x1000), // vaddr, paddr, filesz, memsz, align
	} {
		_ = binary.Write(&b, le, v)
	}
	b.Write(pauseCode)
	return b.Bytes()
}

// pauseImage is the pause image's reference, named by its content.
func pauseImage() string {
	sum := sha256.Sum256(pauseELF())
	return "meshlet/pause:" + hex.EncodeToString(sum[:6])
}

// pauseSupported: the pause program exists for this architecture.
func pauseSupported() error {
	if runtime.GOARCH != "amd64" {
		return fmt.Errorf("%w: the pause program is only built for amd64, not %s", ErrNetNSUnsupported, runtime.GOARCH)
	}
	return nil
}

// PauseImage is the pause image's reference.
func PauseImage() string { return pauseImage() }

// ensurePauseImage imports the pause image unless present.
func (d *Driver) ensurePauseImage(ctx context.Context, c *client.Client) error {
	ref := pauseImage()
	if _, err := c.ImageInspect(ctx, ref); err == nil {
		return nil
	} else if !cerrdefs.IsNotFound(err) {
		return fmt.Errorf("failed to inspect image %s: %w", ref, err)
	}
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	elf := pauseELF()
	for _, f := range []struct {
		name string
		mode int64
		data []byte
	}{{"pause", 0o755, elf}, {"netns", 0o444, nil}} {
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Mode: f.mode, Size: int64(len(f.data)), Typeflag: tar.TypeReg}); err != nil {
			return err
		}
		if _, err := tw.Write(f.data); err != nil {
			return err
		}
	}
	if err := tw.Close(); err != nil {
		return err
	}
	rc, err := c.ImageImport(ctx, image.ImportSource{Source: &buf, SourceName: "-"}, ref, image.ImportOptions{})
	if err != nil {
		return fmt.Errorf("failed to import image %s: %w", ref, err)
	}
	defer rc.Close()
	if _, err := io.Copy(io.Discard, rc); err != nil {
		return fmt.Errorf("failed to import image %s: %w", ref, err)
	}
	d.images.pulled(ref)
	return nil
}

// pauseName is the allocation's pause container's name.
func pauseName(allocID string) string { return "meshlet-pause-" + allocID }

// allocLocks serializes pause container work per allocation.
type allocLocks struct {
	mu    sync.Mutex
	locks map[string]*sync.Mutex
}

func (l *allocLocks) lock(allocID string) func() {
	l.mu.Lock()
	if l.locks == nil {
		l.locks = map[string]*sync.Mutex{}
	}
	m := l.locks[allocID]
	if m == nil {
		m = &sync.Mutex{}
		l.locks[allocID] = m
	}
	l.mu.Unlock()
	m.Lock()
	return m.Unlock
}

// nsInode is the inode of a namespace file (0 if unreadable).
func nsInode(path string) uint64 {
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return 0
	}
	return st.Ino
}

// ensurePause returns the ID of the allocation's running pause container
// in netnsPath, (re)making it when missing, stopped, or in another
// namespace (the allocation's was recreated). Its hostname (the group
// network's, or Docker's default) is every joining container's.
func (d *Driver) ensurePause(ctx context.Context, c *client.Client, allocID, netnsPath, hostname string) (_ string, err error) {
	if err := pauseSupported(); err != nil {
		return "", err
	}
	want := nsInode(netnsPath)
	if want == 0 {
		return "", fmt.Errorf("%w: namespace %s is not there", ErrPause, netnsPath)
	}
	unlock := d.pauseLocks.lock(allocID)
	defer unlock()
	// Held before the image is looked at, so image GC cannot remove it
	// between the check and the create; released again on failure.
	d.images.acquire(pauseImage(), pauseUser(allocID))
	defer func() {
		if err != nil {
			d.images.release(pauseImage(), pauseUser(allocID))
		}
	}()
	name := pauseName(allocID)
	if info, err := c.ContainerInspect(ctx, name); err == nil {
		if info.State != nil && info.State.Running && nsInode(fmt.Sprintf("/proc/%d/ns/net", info.State.Pid)) == want {
			return info.ID, nil
		}
		d.logger.Info("replacing stale pause container", "alloc_id", allocID, "container_id", shortID(info.ID))
		d.removeContainer(info.ID)
	} else if !cerrdefs.IsNotFound(err) {
		return "", fmt.Errorf("%w: %w", ErrPause, err)
	}
	if err := d.ensurePauseImage(ctx, c); err != nil {
		return "", fmt.Errorf("%w: %w", ErrPause, err)
	}
	created, err := c.ContainerCreate(ctx, &container.Config{
		Image: pauseImage(), Entrypoint: []string{"/pause"}, Hostname: hostname,
		Labels: map[string]string{LabelAllocID: allocID, LabelPause: "true", LabelOwner: d.owner()},
	}, &container.HostConfig{
		NetworkMode: NetworkModeNone,
		Binds:       []string{netnsPath + ":/netns:ro"},
		CapDrop:     []string{"ALL"},
		CapAdd:      []string{"CAP_SYS_ADMIN"}, // setns into a namespace of the host's user namespace
		LogConfig:   container.LogConfig{Type: "json-file"},
	}, nil, nil, name)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrPause, err)
	}
	if err := c.ContainerStart(ctx, created.ID, container.StartOptions{}); err != nil {
		d.removeContainer(created.ID)
		return "", fmt.Errorf("%w: %w", ErrPause, err)
	}
	if err := waitInNetNS(ctx, c, created.ID, want); err != nil {
		d.removeContainer(created.ID)
		return "", err
	}
	d.logger.Info("pause container started", "alloc_id", allocID, "container_id", shortID(created.ID))
	return created.ID, nil
}

// waitInNetNS waits until the pause container's process is in the
// namespace with inode want.
func waitInNetNS(ctx context.Context, c *client.Client, id string, want uint64) error {
	deadline := time.Now().Add(pauseWait)
	for {
		info, err := c.ContainerInspect(ctx, id)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrPause, err)
		}
		if info.State == nil || !info.State.Running {
			code := -1
			if info.State != nil {
				code = info.State.ExitCode
			}
			return fmt.Errorf("%w: it exited with code %d (could it not enter the namespace?)", ErrPause, code)
		}
		if nsInode(fmt.Sprintf("/proc/%d/ns/net", info.State.Pid)) == want {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%w: it did not enter the namespace within %s", ErrPause, pauseWait)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// releasePause removes the allocation's pause container once no task of
// the allocation is tracked any more. The namespace itself is meshlet's
// network hook's to tear down.
func (d *Driver) releasePause(allocID string) {
	// Under the allocation's pause lock, which a starting task takes (in
	// ensurePause) after reserving its slot: a task that got the pause
	// container's ID cannot see it removed before it joins.
	unlock := d.pauseLocks.lock(allocID)
	defer unlock()
	d.mu.RLock()
	for _, h := range d.tasks {
		// A task still starting (nil) may be about to join: keep the
		// pause container; a later release or Sweep removes it.
		if h == nil || h.cfg.AllocID == allocID {
			d.mu.RUnlock()
			return
		}
	}
	d.mu.RUnlock()
	c, err := d.docker()
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), controlTimeout)
	defer cancel()
	if err := c.ContainerRemove(ctx, pauseName(allocID), container.RemoveOptions{Force: true}); err != nil && !cerrdefs.IsNotFound(err) {
		d.logger.Warn("failed to remove pause container", "alloc_id", allocID, "error", err)
		return
	}
	d.images.release(pauseImage(), pauseUser(allocID))
}

// pauseUser is an allocation's pause container as a user of the image.
func pauseUser(allocID string) string { return "pause/" + allocID }
