// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/mountinfo"
)

// A launcher's hotplug-disks is the kubelet's emptyDir: a plain directory
// on the pods directory's mount (the default medium), or a tmpfs the
// kubelet mounted on it (medium Memory). Anything else mounted there, or on
// a directory between the pods directory and it (the pod's directory, its
// volumes, kubernetes.io~empty-dir), puts a path the kubelet did not make
// where the agent creates, binds and chowns: a bind of a host directory
// would have it write into the host. "Is a mount point" alone is not the
// test, since the memory-medium emptyDir is one; the mount's own facts in
// the host's mountinfo are.

// openTargetDir opens the launcher's hotplug-disks directory (targetDir,
// relative to the kubelet root, under the pods directory) beneath root,
// refusing symlinks on the way and mounts the kubelet did not make
// (checkEmptyDirMount), and returns it with the id of the mount it is on.
// The mount is the opened descriptor's own, so a mount made after the
// check cannot redirect what the caller then does through it.
func openTargetDir(t *mountinfo.Table, root *os.File, targetDir string) (*os.File, uint64, error) {
	dir, err := isolation.OpenBeneath(root, targetDir, isolation.How{Flags: unix.O_RDONLY | unix.O_DIRECTORY})
	if err != nil {
		return nil, 0, fmt.Errorf("target directory: %w", err)
	}
	fail := func(err error) (*os.File, uint64, error) {
		dir.Close()
		return nil, 0, err
	}
	id, err := isolation.MountID(dir)
	if err != nil {
		return fail(err)
	}
	podsID, err := mountIDBeneath(root, strings.SplitN(targetDir, "/", 2)[0])
	if err != nil {
		return fail(err)
	}
	if id != podsID {
		if err := checkEmptyDirMount(t, id, podsID, filepath.Join(root.Name(), targetDir), targetDir); err != nil {
			return fail(err)
		}
	}
	return dir, id, nil
}

// mountIDBeneath is the id of the mount rel (beneath root) is on.
func mountIDBeneath(root *os.File, rel string) (uint64, error) {
	f, err := isolation.OpenBeneath(root, rel, isolation.How{Flags: unix.O_PATH | unix.O_DIRECTORY})
	if err != nil {
		return 0, fmt.Errorf("pods directory: %w", err)
	}
	defer f.Close()
	return isolation.MountID(f)
}

// checkEmptyDirMount judges mount id, the mount the directory at
// mountPoint (the host's spelling of rel, a launcher's hotplug-disks) was
// found on, when it is not the pods directory's mount podsID. It passes
// only a memory-medium emptyDir as the kubelet mounts it: a tmpfs mounted
// on hotplug-disks itself, directly on the pods directory's mount (so no
// directory above it is a mount point), with root "/" (a whole tmpfs, not
// a bind of a directory of one), whose filesystem is mounted nowhere else
// in the host namespace except at another spelling of rel (a copy
// propagated to a second view of the kubelet root): a bind of the host's
// /dev/shm or /run has root "/" too, but its tmpfs is mounted there.
// A refusal wraps isolation.ErrUnsafePath. A mount the table does not know
// yet (newer than the batch's read) is an error to retry, not a refusal.
func checkEmptyDirMount(t *mountinfo.Table, id, podsID uint64, mountPoint, rel string) error {
	var m *mountinfo.Info
	if t != nil {
		m = t.ByID(int(id))
	}
	if m == nil {
		return fmt.Errorf("hotplug-disks %q is on mount %d, newer than the mount table read for this batch", mountPoint, id)
	}
	if m.MountPoint != mountPoint || uint64(m.Parent) != podsID {
		return fmt.Errorf("hotplug-disks %q: %w: inside %s mounted at %q, which the kubelet never mounts",
			mountPoint, isolation.ErrUnsafePath, describeMount(t, id), m.MountPoint)
	}
	if m.FSType != "tmpfs" || m.Root != "/" {
		return fmt.Errorf("hotplug-disks %q: %w: a mount of %s[%s] (%s), not a memory-medium emptyDir (a tmpfs of its own)",
			mountPoint, isolation.ErrUnsafePath, m.Source, m.Root, m.FSType)
	}
	for _, o := range t.ByDevice(m.Major, m.Minor) {
		if o.ID == m.ID || (o.Root == "/" && strings.HasSuffix(o.MountPoint, "/"+path.Clean(rel))) {
			continue
		}
		return fmt.Errorf("hotplug-disks %q: %w: its tmpfs %s is also mounted at %q[%s]: a bind of a host path, not a memory-medium emptyDir",
			mountPoint, isolation.ErrUnsafePath, m.Dev(), o.MountPoint, o.Root)
	}
	return nil
}

func (a *Attacher) openLauncherDir(t *mountinfo.Table, targetDir string) (*os.File, error) {
	if dir, _, ok := a.opened.again(targetDir); ok {
		return dir, nil
	}
	root, err := openKubeletRoot(a.KubeletRoot)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	dir, _, err := openTargetDir(t, root, targetDir)
	return dir, err
}

func uncover(s steps, t *mountinfo.Table, dir *os.File, name string) (int, error) {
	if err := ValidTarget(name); err != nil {
		return 0, fmt.Errorf("uncover in %q: %w", dir.Name(), err)
	}
	dirID, err := isolation.MountID(dir)
	if err != nil {
		return 0, err
	}
	return peel(s, t, dir, dirID, name)
}

// openedDir is the launcher directory a WithLauncherDir copy holds open.
type openedDir struct {
	rel string
	dir *os.File
	id  uint64
}

func (a *Attacher) withLauncherDir(t *mountinfo.Table, targetDir string, fn func(*Attacher) error) error {
	if a.NS != nil {
		return fn(a) // the walk would run on this thread, not in a.NS
	}
	root, err := openKubeletRoot(a.KubeletRoot)
	if err != nil {
		return fn(a)
	}
	dir, id, err := openTargetDir(t, root, targetDir)
	root.Close()
	if err != nil {
		return fn(a)
	}
	defer dir.Close()
	held := *a
	held.opened = &openedDir{rel: targetDir, dir: dir, id: id}
	return fn(&held)
}

// again opens the held directory anew when it is rel: "." from its
// descriptor is the same directory on the same mount, with no path walked
// and an offset of its own for a listing.
func (o *openedDir) again(rel string) (*os.File, uint64, bool) {
	if o == nil || o.rel != rel {
		return nil, 0, false
	}
	fd, err := unix.Openat(int(o.dir.Fd()), ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, 0, false
	}
	return os.NewFile(uintptr(fd), o.dir.Name()), o.id, true
}
