package blockdev

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"

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
	return isolation.Call(n.NS, func() (Published, error) {
		f, err := kubelet.OpenPublishedDevice(n.Root, podUID, pvName)
		if err != nil {
			return Published{}, err
		}
		defer f.Close()
		return statBlock(f)
	})
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
	c, err := isolation.Call(n.NS, func() (change, error) {
		dir, err := n.openDir(targetDir)
		if err != nil {
			return change{}, err
		}
		defer dir.Close()
		dfd := int(dir.Fd())
		var st unix.Stat_t
		c := change{Result: outcome.Created}
		switch err := unix.Fstatat(dfd, name, &st, unix.AT_SYMLINK_NOFOLLOW); {
		case errors.Is(err, unix.ENOENT):
		case err != nil:
			return change{}, fmt.Errorf("stat %q in %q: %w", name, targetDir, err)
		case st.Mode&unix.S_IFMT != unix.S_IFBLK:
			return change{}, fmt.Errorf("%q in %q: %w: exists and is not a block device (mode %o)", name, targetDir, isolation.ErrUnsafePath, st.Mode)
		case unix.Major(st.Rdev) == p.Device.Major && unix.Minor(st.Rdev) == p.Device.Minor:
			return change{}, n.fixOwner(dfd, targetDir, name, p, &st)
		default:
			if err := unix.Unlinkat(dfd, name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
				return change{}, fmt.Errorf("remove stale node %q in %q: %w", name, targetDir, err)
			}
			c = change{outcome.Replaced, Device{Major: unix.Major(st.Rdev), Minor: unix.Minor(st.Rdev)}}
		}
		dev := unix.Mkdev(p.Device.Major, p.Device.Minor)
		if err := unix.Mknodat(dfd, name, unix.S_IFBLK|p.Perm, int(dev)); err != nil {
			return change{}, fmt.Errorf("mknod %q in %q as %d:%d: %w", name, targetDir, p.Device.Major, p.Device.Minor, err)
		}
		return c, n.verifyAndOwn(dfd, targetDir, name, p)
	})
	return c.result(), c.Dev, err
}

// change is what Ensure or Remove did to a node, and the device it had.
type change struct {
	Result outcome.Result
	Dev    Device
}

func (c change) result() outcome.Result {
	if c.Result == "" {
		return outcome.Unchanged
	}
	return c.Result
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
	return n.record(fd, p.Device)
}

// fixOwner corrects the owner of a node that already names the published
// device, and records which disk that is if the node has no record yet.
func (n *Nodes) fixOwner(dfd int, targetDir, name string, p Published, st *unix.Stat_t) error {
	if int(st.Uid) != n.UID || int(st.Gid) != n.GID {
		return n.verifyAndOwn(dfd, targetDir, name, p)
	}
	fd, err := unix.Openat(dfd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("open node %q in %q: %w", name, targetDir, err)
	}
	defer unix.Close(fd)
	if _, err := recorded(fd); err == nil {
		return nil
	}
	return n.record(fd, p.Device)
}

// Remove unlinks the block node targetDir/name and returns the device it
// pointed at. A missing node or directory is success.
func (n *Nodes) Remove(targetDir, name string) (outcome.Result, Device, error) {
	if err := kubelet.ValidName(name); err != nil {
		return outcome.Unchanged, Device{}, err
	}
	c, err := isolation.Call(n.NS, func() (change, error) {
		dir, err := n.openDir(targetDir)
		if errors.Is(err, unix.ENOENT) {
			return change{}, nil
		}
		if err != nil {
			return change{}, err
		}
		defer dir.Close()
		var st unix.Stat_t
		err = unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW)
		if errors.Is(err, unix.ENOENT) {
			return change{}, nil
		}
		if err != nil {
			return change{}, fmt.Errorf("stat %q in %q: %w", name, targetDir, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFBLK {
			return change{}, fmt.Errorf("%q in %q: %w: not a block device, not removing it", name, targetDir, isolation.ErrUnsafePath)
		}
		if err := unix.Unlinkat(int(dir.Fd()), name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
			return change{}, fmt.Errorf("remove node %q in %q: %w", name, targetDir, err)
		}
		return change{outcome.Removed, Device{Major: unix.Major(st.Rdev), Minor: unix.Minor(st.Rdev)}}, nil
	})
	return c.result(), c.Dev, err
}

// Observe lists the block device nodes in targetDir. A missing directory
// has none.
func (n *Nodes) Observe(targetDir string) ([]Node, error) {
	return isolation.Call(n.NS, func() ([]Node, error) {
		dir, err := n.openDir(targetDir)
		if errors.Is(err, unix.ENOENT) {
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		defer dir.Close()
		entries, _, err := kubelet.ReadTargets(dir)
		if err != nil {
			return nil, err
		}
		var nodes []Node
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
		return nodes, nil
	})
}

func (n *Nodes) openDir(rel string) (*os.File, error) {
	root, err := n.Root.Open()
	if err != nil {
		return nil, err
	}
	defer root.Close()
	return isolation.OpenBeneath(root, rel, isolation.How{Flags: unix.O_RDONLY | unix.O_DIRECTORY})
}

// diskSeqAttr holds, on a node, the sequence number of the disk it was
// made for. The kernel gives every disk a new one when it appears, so a
// major:minor given to another disk later has another.
const diskSeqAttr = "trusted.hpmount.diskseq"

func (n *Nodes) diskSeq(dev Device) (string, error) {
	sys := n.SysRoot
	if sys == "" {
		sys = "/sys"
	}
	b, err := os.ReadFile(filepath.Join(sys, "dev", "block", fmt.Sprintf("%d:%d", dev.Major, dev.Minor), "diskseq"))
	if err != nil {
		return "", fmt.Errorf("sequence number of disk %s: %w", dev, err)
	}
	return strings.TrimSpace(string(b)), nil
}

// record keeps the disk's sequence number on the node behind fd, a node
// already verified to be dev. A kernel without sequence numbers, or a
// filesystem without trusted xattrs, leaves the node without a record:
// Recheck then grants nothing for it.
func (n *Nodes) record(fd int, dev Device) error {
	seq, err := n.diskSeq(dev)
	if err != nil {
		return nil
	}
	err = unix.Setxattr(procFd(fd), diskSeqAttr, []byte(seq), 0)
	if errors.Is(err, unix.ENOTSUP) {
		// A kubelet root on a filesystem without trusted xattrs: the
		// node works, only an unpublished volume's lost rule cannot be
		// granted again (Recheck says why).
		return nil
	}
	if err != nil {
		return fmt.Errorf("record disk %s on its node: %w", dev, err)
	}
	return nil
}

// recorded reads the sequence number kept on the node behind fd.
func recorded(fd int) (string, error) {
	buf := make([]byte, 32)
	sz, err := unix.Getxattr(procFd(fd), diskSeqAttr, buf)
	if err != nil {
		return "", err
	}
	return string(buf[:sz]), nil
}

// procFd names fd through procfs: the xattr calls do not take an O_PATH
// descriptor, and the magic link reaches exactly its inode.
func procFd(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

func (n *Nodes) recheck(targetDir, name string) (Device, error) {
	if err := kubelet.ValidName(name); err != nil {
		return Device{}, err
	}
	return isolation.Call(n.NS, func() (Device, error) {
		dir, err := n.openDir(targetDir)
		if err != nil {
			return Device{}, err
		}
		defer dir.Close()
		fd, err := unix.Openat(int(dir.Fd()), name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			return Device{}, fmt.Errorf("open node %q in %q: %w", name, targetDir, err)
		}
		defer unix.Close(fd)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil {
			return Device{}, fmt.Errorf("stat node %q in %q: %w", name, targetDir, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFBLK {
			return Device{}, fmt.Errorf("%q in %q: %w: not a block device", name, targetDir, isolation.ErrUnsafePath)
		}
		dev := Device{Major: unix.Major(st.Rdev), Minor: unix.Minor(st.Rdev)}
		return dev, n.confirm(fd, dev)
	})
}

// confirm checks the node's record against the disk that now has dev.
func (n *Nodes) confirm(fd int, dev Device) error {
	want, err := recorded(fd)
	if err != nil {
		return fmt.Errorf("node of %s: %w: no record of the disk it was made for (%v)", dev, ErrUnconfirmed, err)
	}
	now, err := n.diskSeq(dev)
	if err != nil {
		return fmt.Errorf("node of %s: %w: %v", dev, ErrUnconfirmed, err)
	}
	if now != want {
		return fmt.Errorf("node of %s: %w: %s is now disk %s, the node was made for disk %s", dev, ErrUnconfirmed, dev, now, want)
	}
	return nil
}
