// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import (
	"errors"
	"fmt"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/isolation"
)

func (a *Attacher) createDiskImage(sourceDir string, capacity int64, overhead float64) (int64, bool, error) {
	type made struct {
		size    int64
		created bool
	}
	m, err := inHost(a, func(s steps) (made, error) {
		size, created, err := a.createDiskImageHere(s, sourceDir, capacity, overhead)
		return made{size, created}, err
	})
	return m.size, m.created, err
}

func (a *Attacher) createDiskImageHere(s steps, sourceDir string, capacity int64, overhead float64) (int64, bool, error) {
	root, err := openKubeletRoot(a.KubeletRoot)
	if err != nil {
		return 0, false, err
	}
	defer root.Close()
	vol, err := isolation.OpenBeneath(root, sourceDir, isolation.How{Flags: unix.O_PATH | unix.O_DIRECTORY})
	if err != nil {
		return 0, false, fmt.Errorf("volume directory: %w", err)
	}
	defer vol.Close()
	where := filepath.Join(vol.Name(), diskImage)
	usage, err := FilesystemSizeOf(vol)
	if err != nil {
		return 0, false, err
	}
	want, err := DiskImageSize(capacity, overhead, usage.AvailableBytes, 0)
	if err != nil {
		return 0, false, fmt.Errorf("size of %q: %w", where, err)
	}
	if want <= 0 {
		return 0, false, fmt.Errorf("create %q: the claim's capacity (%d bytes) and the filesystem's free space (%d bytes) leave no size of at least 1 MiB", where, capacity, usage.AvailableBytes)
	}
	if err := s.next("create disk image"); err != nil {
		return 0, false, fmt.Errorf("create %q: %w", where, err)
	}
	fd, err := unix.Openat(int(vol.Fd()), diskImage, unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_WRONLY|unix.O_CLOEXEC, 0o660)
	if errors.Is(err, unix.EEXIST) {
		// Someone made it meanwhile (the agent of a migration's other
		// node, or an importer): theirs, never touched.
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("create %q: %w", where, err)
	}
	defer unix.Close(fd)
	if err := a.fillNewImage(s, fd, want); err != nil {
		// The file is the one this call created a moment ago and holds
		// nothing: it goes, so that the next attempt starts clean.
		_ = unix.Unlinkat(int(vol.Fd()), diskImage, 0)
		return 0, false, fmt.Errorf("create %q: %w", where, err)
	}
	return want, true, nil
}

// fillNewImage gives a freshly created image its mode, size (sparse) and
// the QEMU user.
//
// A call given up meanwhile stops before its next step, and the file goes
// as on any failure: a half-made image must not be bound by the next
// attach.
func (a *Attacher) fillNewImage(s steps, fd int, size int64) error {
	uid, gid := a.qemuIDs()
	if err := s.next("size disk image"); err != nil {
		return err
	}
	// The umask must not decide the mode.
	if err := unix.Fchmod(fd, 0o660); err != nil {
		return fmt.Errorf("chmod: %w", err)
	}
	if err := unix.Ftruncate(fd, size); err != nil {
		return fmt.Errorf("set size %d: %w", size, err)
	}
	if err := unix.Fchown(fd, uid, gid); err != nil {
		return fmt.Errorf("chown to %d:%d: %w", uid, gid, err)
	}
	return nil
}
