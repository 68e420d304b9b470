package blockdev

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/outcome"
)

// PublishedDevice returns the device that the kubelet published for pod
// podUID's block volume pvName (see kubelet.OpenPublishedDevice) and the
// permission of its node. A volume not published wraps
// kubelet.ErrNotPublished; anything there that is not a block device wraps
// isolation.ErrUnsafePath.
func (n *Nodes) PublishedDevice(podUID, pvName string) (Published, error) {
	var p Published
	err := n.NS.Do(func() error {
		f, err := kubelet.OpenPublishedDevice(n.Root, podUID, pvName)
		if err != nil {
			return err
		}
		defer f.Close()
		p, err = statBlock(f)
		return err
	})
	return p, err
}

func statBlock(f *os.File) (Published, error) {
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		return Published{}, fmt.Errorf("stat published device %q: %w", f.Name(), err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return Published{}, fmt.Errorf("published device %q: %w: not a block device (mode %o)", f.Name(), isolation.ErrUnsafePath, st.Mode)
	}
	d := Device{Major: unix.Major(st.Rdev), Minor: unix.Minor(st.Rdev)}
	return Published{Device: d, Perm: st.Mode & 0o777}, d.Validate()
}

// Ensure makes targetDir/name a block device node for p, owned by UID:GID.
// A node for another device is replaced, and that device is returned so its
// cgroup rule can be dropped; a correct node is left alone with no changing
// syscall. Anything else under that name is refused, not removed: it is not
// ours.
func (n *Nodes) Ensure(targetDir, name string, p Published) (outcome.Result, Device, error) {
	if err := kubelet.ValidName(name); err != nil {
		return outcome.Unchanged, Device{}, err
	}
	if err := p.Device.Validate(); err != nil {
		return outcome.Unchanged, Device{}, err
	}
	result, old := outcome.Unchanged, Device{}
	err := n.NS.Do(func() error {
		dir, err := n.openDir(targetDir)
		if err != nil {
			return err
		}
		defer dir.Close()
		dfd := int(dir.Fd())
		var st unix.Stat_t
		switch err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); {
		case errors.Is(err, unix.ENOENT):
			result = outcome.Created
		case err != nil:
			return fmt.Errorf("stat %q in %q: %w", name, targetDir, err)
		case st.Mode&unix.S_IFMT != unix.S_IFBLK:
			return fmt.Errorf("%q in %q: %w: exists and is not a block device (mode %o)", name, targetDir, isolation.ErrUnsafePath, st.Mode)
		case unix.Major(st.Rdev) == p.Device.Major && unix.Minor(st.Rdev) == p.Device.Minor:
			return n.fixOwner(dfd, targetDir, name, p, &st)
		default:
			if err := unix.Unlinkat(dfd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
				return fmt.Errorf("remove stale node %q in %q: %w", name, targetDir, err)
			}
			result, old = outcome.Replaced, Device{Major: unix.Major(st.Rdev), Minor: unix.Minor(st.Rdev)}
		}
		dev := unix.Mkdev(p.Device.Major, p.Device.Minor)
		if err := unix.Mknodat(dfd, name, unix.S_IFBLK|p.Perm, int(dev)); err != nil {
			return fmt.Errorf("mknod %q in %q as %d:%d: %w", name, targetDir, p.Device.Major, p.Device.Minor, err)
		}
		return n.verifyAndOwn(dfd, targetDir, name, p)
	})
	return result, old, err
}

// verifyAndOwn re-opens the new node without following links and checks it
// is the device just made before changing its owner through that fd, so a
// name swapped meanwhile is never chowned.
func (n *Nodes) verifyAndOwn(dfd int, targetDir, name string, p Published) error {
	fd, err := unix.Openat(dfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open new node %q in %q: %w", name, targetDir, err)
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return fmt.Errorf("stat new node %q in %q: %w", name, targetDir, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK || unix.Major(st.Rdev) != p.Device.Major || unix.Minor(st.Rdev) != p.Device.Minor {
		return fmt.Errorf("node %q in %q changed under us: %w", name, targetDir, isolation.ErrUnsafePath)
	}
	if err := unix.Fchownat(fd, "", n.UID, n.GID, unix.AT_EMPTY_PATH); err != nil {
		return fmt.Errorf("chown node %q in %q: %w", name, targetDir, err)
	}
	return nil
}

func (n *Nodes) fixOwner(dfd int, targetDir, name string, p Published, st *unix.Stat_t) error {
	if int(st.Uid) == n.UID && int(st.Gid) == n.GID {
		return nil
	}
	return n.verifyAndOwn(dfd, targetDir, name, p)
}

// Remove unlinks the block node targetDir/name and returns the device it
// pointed at. A missing node or directory is success.
func (n *Nodes) Remove(targetDir, name string) (outcome.Result, Device, error) {
	if err := kubelet.ValidName(name); err != nil {
		return outcome.Unchanged, Device{}, err
	}
	result, dev := outcome.Unchanged, Device{}
	err := n.NS.Do(func() error {
		dir, err := n.openDir(targetDir)
		if errors.Is(err, unix.ENOENT) {
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
			return fmt.Errorf("stat %q in %q: %w", name, targetDir, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFBLK {
			return fmt.Errorf("%q in %q: %w: not a block device, not removing it", name, targetDir, isolation.ErrUnsafePath)
		}
		if err := unix.Unlinkat(int(dir.Fd()), name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("remove node %q in %q: %w", name, targetDir, err)
		}
		result, dev = outcome.Removed, Device{Major: unix.Major(st.Rdev), Minor: unix.Minor(st.Rdev)}
		return nil
	})
	return result, dev, err
}

// Observe lists the block device nodes in targetDir. A missing directory
// has none.
func (n *Nodes) Observe(targetDir string) ([]Node, error) {
	var nodes []Node
	err := n.NS.Do(func() error {
		dir, err := n.openDir(targetDir)
		if errors.Is(err, unix.ENOENT) {
			return nil
		}
		if err != nil {
			return err
		}
		defer dir.Close()
		entries, _, err := kubelet.ReadTargets(dir)
		if err != nil {
			return err
		}
		for _, e := range entries {
			name := e.Name()
			if e.Type()&fs.ModeDevice == 0 || e.Type()&fs.ModeCharDevice != 0 {
				continue // not a block node: passed over without a stat
			}
			var st unix.Stat_t
			if err := unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
				continue // removed while listing
			}
			if st.Mode&unix.S_IFMT == unix.S_IFBLK {
				nodes = append(nodes, Node{Name: name, Device: Device{Major: unix.Major(st.Rdev), Minor: unix.Minor(st.Rdev)}})
			}
		}
		return nil
	})
	return nodes, err
}

func (n *Nodes) openDir(rel string) (*os.File, error) {
	root, err := n.Root.Open()
	if err != nil {
		return nil, err
	}
	defer root.Close()
	return isolation.OpenBeneath(root, rel, isolation.How{Flags: unix.O_RDONLY | unix.O_DIRECTORY})
}
