// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

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

// Ensure makes name in dir a block device node for p, owned by UID:GID.
// A node for another device is replaced, and that device is returned so its
// cgroup rule can be dropped; a correct node is left alone with no changing
// syscall. Anything else under that name, or a mount on it, is refused,
// not removed: it is not ours.
func (n *Nodes) Ensure(dir *os.File, name string, p Published) (outcome.Result, Device, error) {
	if err := kubelet.ValidName(name); err != nil {
		return outcome.Unchanged, Device{}, err
	}
	if err := p.Device.Validate(); err != nil {
		return outcome.Unchanged, Device{}, err
	}
	dirID, err := isolation.MountID(dir)
	if err != nil {
		return outcome.Unchanged, Device{}, err
	}
	c, made, err := n.place(dir, dirID, name, p)
	if errors.Is(err, unix.EEXIST) {
		// virt-handler's mounter made the node between the lookup and
		// mknod: judge what it made like anything else found there. A
		// stale node this call removed stays the change to report, so
		// that its device's rule is dropped.
		var again change
		again, made, err = n.place(dir, dirID, name, p)
		if c.Result != outcome.Replaced {
			c = again
		}
	}
	if err != nil || !made {
		return c.result(), c.Dev, err
	}
	return c.result(), c.Dev, n.verifyAndOwn(dir, dirID, name, p)
}

// place looks at name and settles what is there; if nothing is left, it
// makes the node (made). An error wrapping EEXIST means the name was
// taken after the lookup, and Ensure looks again.
func (n *Nodes) place(dir *os.File, dirID uint64, name string, p Published) (c change, made bool, err error) {
	f, st, err := lookup(dir, dirID, name)
	switch {
	case errors.Is(err, unix.ENOENT):
	case err != nil:
		return change{}, false, err
	default:
		var done bool
		c, done, err = n.settle(dir, f, st, name, p)
		f.Close()
		if done || err != nil {
			return c, false, err
		}
	}
	if n.beforeMknod != nil {
		n.beforeMknod(name)
	}
	dev := unix.Mkdev(p.Device.Major, p.Device.Minor)
	if err := unix.Mknodat(int(dir.Fd()), name, unix.S_IFBLK|p.Perm, int(dev)); err != nil {
		return c, false, fmt.Errorf("mknod %q in %q as %d:%d: %w", name, dir.Name(), p.Device.Major, p.Device.Minor, err)
	}
	if c.Result == "" {
		c.Result = outcome.Created
	}
	return c, true, nil
}

// settle deals with the entry f already at name: a node of p's device
// only has its owner and record fixed (done); a node of another device is
// unlinked, to be made again, and its device returned; anything else is
// refused.
func (n *Nodes) settle(dir, f *os.File, st unix.Stat_t, name string, p Published) (c change, done bool, err error) {
	if err := isNode(dir, name, st); err != nil {
		return change{}, true, err
	}
	switch {
	case unix.Major(st.Rdev) == p.Device.Major && unix.Minor(st.Rdev) == p.Device.Minor:
		return change{}, true, n.fixOwner(f, st, p)
	}
	if err := unix.Unlinkat(int(dir.Fd()), name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return change{}, true, fmt.Errorf("remove stale node %q in %q: %w", name, dir.Name(), err)
	}
	return change{outcome.Replaced, Device{Major: unix.Major(st.Rdev), Minor: unix.Minor(st.Rdev)}}, false, nil
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

// errCovered refuses a name with something mounted on it. hpmount never
// mounts on a block node, and a lookup of the name reaches the top mount:
// a host file or device node bound there would be chowned, recorded or
// opened in the node's stead. mount.Uncover removes such a mount.
var errCovered = fmt.Errorf("%w: something is mounted on it", isolation.ErrUnsafePath)

// Number is d as a dev_t, as stat(2) reports a device node's st_rdev and
// a file's st_dev: what propagation.Current.Device compares QEMU's
// descriptors with.
func (d Device) Number() uint64 { return unix.Mkdev(d.Major, d.Minor) }

func (n *Nodes) look(dir *os.File, name string) (Node, error) {
	dirID, err := isolation.MountID(dir)
	if err != nil {
		return Node{}, err
	}
	f, st, err := lookup(dir, dirID, name)
	if errors.Is(err, errCovered) {
		return Node{Name: name, Covered: true}, nil
	}
	if err != nil {
		return Node{}, err
	}
	f.Close()
	if err := isNode(dir, name, st); err != nil {
		return Node{}, err
	}
	return Node{Name: name, Device: Device{Major: unix.Major(st.Rdev), Minor: unix.Minor(st.Rdev)}}, nil
}

// isNode refuses an entry name of dir, stat st, that is not a block
// device: the agent never makes or touches one.
func isNode(dir *os.File, name string, st unix.Stat_t) error {
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return fmt.Errorf("%q in %q: %w: exists and is not a block device (mode %o)", name, dir.Name(), isolation.ErrUnsafePath, st.Mode)
	}
	return nil
}

// lookup opens name in dir as O_PATH without following a symlink and
// stats it, refusing it (errCovered) unless it is on dir's own mount.
func lookup(dir *os.File, dirID uint64, name string) (*os.File, unix.Stat_t, error) {
	var st unix.Stat_t
	where := filepath.Join(dir.Name(), name)
	fd, err := unix.Openat(int(dir.Fd()), name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, st, fmt.Errorf("open %q: %w", where, err)
	}
	f := os.NewFile(uintptr(fd), where)
	id, err := isolation.MountID(f)
	if err == nil && id != dirID {
		err = fmt.Errorf("%q: %w (mount %d, not the directory's %d)", where, errCovered, id, dirID)
	}
	if err == nil {
		if err = unix.Fstat(fd, &st); err != nil {
			err = fmt.Errorf("stat %q: %w", where, err)
		}
	}
	if err != nil {
		f.Close()
		return nil, st, err
	}
	return f, st, nil
}

// verifyAndOwn looks the new node up again (without following links, on
// dir's own mount) and checks it is the device just made before changing
// its owner through that descriptor, so a name swapped or covered
// meanwhile is never chowned.
func (n *Nodes) verifyAndOwn(dir *os.File, dirID uint64, name string, p Published) error {
	f, st, err := lookup(dir, dirID, name)
	if err != nil {
		return fmt.Errorf("new node: %w", err)
	}
	defer f.Close()
	if st.Mode&unix.S_IFMT != unix.S_IFBLK || unix.Major(st.Rdev) != p.Device.Major || unix.Minor(st.Rdev) != p.Device.Minor {
		return fmt.Errorf("node %q changed under us: %w", f.Name(), isolation.ErrUnsafePath)
	}
	return n.own(f, p.Device)
}

// own gives the verified node f to UID:GID and records its disk.
func (n *Nodes) own(f *os.File, dev Device) error {
	if err := unix.Fchownat(int(f.Fd()), "", n.UID, n.GID, unix.AT_EMPTY_PATH); err != nil {
		return fmt.Errorf("chown node %q: %w", f.Name(), err)
	}
	return n.record(int(f.Fd()), dev)
}

// fixOwner corrects the owner of f, a node (not covered) that already
// names the published device, and records which disk that is if the node
// has no record yet.
func (n *Nodes) fixOwner(f *os.File, st unix.Stat_t, p Published) error {
	if int(st.Uid) != n.UID || int(st.Gid) != n.GID {
		return n.own(f, p.Device)
	}
	if _, err := recorded(int(f.Fd())); err == nil {
		return nil
	}
	return n.record(int(f.Fd()), p.Device)
}

// Remove unlinks the block node name in dir and returns the device it
// pointed at. A missing node is success; anything else under the name, or
// a mount on it, is refused and left.
func (n *Nodes) Remove(dir *os.File, name string) (outcome.Result, Device, error) {
	if err := kubelet.ValidName(name); err != nil {
		return outcome.Unchanged, Device{}, err
	}
	dirID, err := isolation.MountID(dir)
	if err != nil {
		return outcome.Unchanged, Device{}, err
	}
	f, st, err := lookup(dir, dirID, name)
	if errors.Is(err, unix.ENOENT) {
		return outcome.Unchanged, Device{}, nil
	}
	if err != nil {
		return outcome.Unchanged, Device{}, err
	}
	f.Close()
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return outcome.Unchanged, Device{}, fmt.Errorf("%q in %q: %w: not a block device, not removing it", name, dir.Name(), isolation.ErrUnsafePath)
	}
	if err := unix.Unlinkat(int(dir.Fd()), name, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return outcome.Unchanged, Device{}, fmt.Errorf("remove node %q in %q: %w", name, dir.Name(), err)
	}
	return outcome.Removed, Device{Major: unix.Major(st.Rdev), Minor: unix.Minor(st.Rdev)}, nil
}

// Observe lists the block device nodes in dir. A node with something
// mounted on it is listed as Covered, without a device.
func (n *Nodes) Observe(dir *os.File) ([]Node, error) {
	dirID, err := isolation.MountID(dir)
	if err != nil {
		return nil, err
	}
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
		f, st, err := lookup(dir, dirID, name)
		switch {
		case errors.Is(err, errCovered):
			nodes = append(nodes, Node{Name: name, Covered: true})
		case err != nil:
			continue // removed while listing
		case st.Mode&unix.S_IFMT == unix.S_IFBLK:
			nodes = append(nodes, Node{Name: name, Device: Device{Major: unix.Major(st.Rdev), Minor: unix.Minor(st.Rdev)}})
		}
		if f != nil {
			f.Close()
		}
	}
	return nodes, nil
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

func (n *Nodes) recheck(dir *os.File, name string) (Device, error) {
	if err := kubelet.ValidName(name); err != nil {
		return Device{}, err
	}
	dirID, err := isolation.MountID(dir)
	if err != nil {
		return Device{}, err
	}
	f, st, err := lookup(dir, dirID, name)
	if err != nil {
		return Device{}, fmt.Errorf("node: %w", err)
	}
	defer f.Close()
	if st.Mode&unix.S_IFMT != unix.S_IFBLK {
		return Device{}, fmt.Errorf("%q: %w: not a block device", f.Name(), isolation.ErrUnsafePath)
	}
	dev := Device{Major: unix.Major(st.Rdev), Minor: unix.Minor(st.Rdev)}
	return dev, n.confirm(int(f.Fd()), dev)
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
