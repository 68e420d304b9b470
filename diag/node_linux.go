package diag

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/mount"
)

// Read-only looks at the kubelet tree, run in the host mount namespace,
// beneath the kubelet root, never following a symlink.

// entry is what a name in a directory is, not following a symlink.
type entry struct {
	exists bool
	kind   string // "regular file", "block device", "symlink", ...
	rdev   [2]uint32
	size   int64
	nlink  uint64
}

func (in *inspector) statEntry(dirRel, name string) (entry, error) {
	var e entry
	err := in.ns.Do(func() error {
		root, err := isolation.OpenRoot(in.opts.KubeletRoot)
		if err != nil {
			return err
		}
		defer root.Close()
		dir, err := isolation.OpenBeneath(root, dirRel, isolation.How{Flags: unix.O_PATH | unix.O_DIRECTORY})
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if err != nil {
			return err
		}
		defer dir.Close()
		var st unix.Stat_t
		err = unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW)
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("stat %q in %q: %w", name, dir.Name(), err)
		}
		e = entry{exists: true, kind: kindOf(st.Mode), size: st.Size, nlink: uint64(st.Nlink),
			rdev: [2]uint32{unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev))}}
		return nil
	})
	return e, err
}

// checkDiskImage opens <sourceDir>/disk.img as the agent does (beneath the
// kubelet root, no symlink, not crossing a mount) and checks that it is a
// regular file with one link. It returns its size; a refusal wraps
// isolation.ErrUnsafePath.
func (in *inspector) checkDiskImage(sourceDir string) (int64, error) {
	var size int64
	err := in.ns.Do(func() error {
		root, err := isolation.OpenRoot(in.opts.KubeletRoot)
		if err != nil {
			return err
		}
		defer root.Close()
		vol, err := isolation.OpenBeneath(root, sourceDir, isolation.How{Flags: unix.O_PATH | unix.O_DIRECTORY})
		if err != nil {
			return fmt.Errorf("volume directory: %w", err)
		}
		defer vol.Close()
		f, err := isolation.OpenBeneath(vol, "disk.img", isolation.How{Flags: unix.O_PATH, SameMount: true})
		if err != nil {
			return fmt.Errorf("disk.img: %w", err)
		}
		defer f.Close()
		var st unix.Stat_t
		if err := unix.Fstat(int(f.Fd()), &st); err != nil {
			return fmt.Errorf("stat %q: %w", f.Name(), err)
		}
		if k := kindOf(st.Mode); k != "regular file" {
			return fmt.Errorf("%q: %w: is a %s, not a regular file", f.Name(), isolation.ErrUnsafePath, k)
		}
		if st.Nlink != 1 {
			return fmt.Errorf("%q: %w: has %d hard links", f.Name(), isolation.ErrUnsafePath, st.Nlink)
		}
		size = st.Size
		return nil
	})
	return size, err
}

// launcherDirs lists the pod UIDs under <kubelet-root>/pods that have a
// hotplug-disks emptyDir directory.
func (in *inspector) launcherDirs() ([]string, error) {
	var uids []string
	err := in.ns.Do(func() error {
		dirs, err := mount.LauncherDirs(in.opts.KubeletRoot)
		for _, d := range dirs {
			uids = append(uids, d.UID)
		}
		return err
	})
	return uids, err
}

// publishedBlockPath names the kubelet's volumeDevices entry of pv for pod
// uid, for display.
func (in *inspector) publishedBlockPath(uid, pv string) string {
	var found string
	_ = in.ns.Do(func() error {
		m, _ := filepath.Glob(filepath.Join(in.opts.KubeletRoot, "pods", uid, "volumeDevices", "*", pv))
		if len(m) > 0 {
			found = m[0]
		}
		return nil
	})
	return found
}

func deviceExists(sysRoot string, dev [2]uint32) bool {
	_, err := os.Lstat(filepath.Join(sysRoot, "dev", "block", fmt.Sprintf("%d:%d", dev[0], dev[1])))
	return err == nil
}

func openHostNamespace(hostProc string, hostPID int) (*isolation.MountNamespace, error) {
	return isolation.OpenMountNamespace(filepath.Join(hostProc, fmt.Sprint(hostPID), "ns", "mnt"))
}

func kindOf(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "regular file"
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFBLK:
		return "block device"
	case unix.S_IFCHR:
		return "character device"
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	}
	return "file of unknown type"
}
