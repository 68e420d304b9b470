// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package simnode

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"github.com/hpmount/hpmount/internal/sandbox"
	"golang.org/x/sys/unix"
)

const inPrivateNamespaceEnv = "HPMOUNT_SIMNODE_PRIVATE_NS"

// ReexecInPrivateNamespace re-runs the current program in a new mount
// namespace with every mount private, and exits with its status. In the
// re-run program it returns at once.
func ReexecInPrivateNamespace() { sandbox.ReexecInPrivateMountNamespace(inPrivateNamespaceEnv) }

// Node is one simulated node.
type Node struct {
	Name        string
	KubeletRoot string
	// CgroupRoot is a private subtree of the v1 devices hierarchy that holds
	// the launchers' pod cgroups; the agent is pointed at it.
	CgroupRoot string
	dir        string
	cleanups   []func()
}

// New makes a node under dir: the kubelet root as a shared mount, as on a
// real node, and a device cgroup subtree.
func New(name, dir string) (*Node, error) {
	n := &Node{Name: name, dir: dir, KubeletRoot: filepath.Join(dir, "kubelet")}
	if err := os.MkdirAll(n.KubeletRoot, 0o755); err != nil {
		return nil, err
	}
	if err := unix.Mount(n.KubeletRoot, n.KubeletRoot, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return nil, fmt.Errorf("bind kubelet root %q: %w", n.KubeletRoot, err)
	}
	n.defer_(func() { unix.Unmount(n.KubeletRoot, unix.MNT_DETACH) })
	if err := unix.Mount("", n.KubeletRoot, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		n.Close()
		return nil, fmt.Errorf("make kubelet root %q shared: %w", n.KubeletRoot, err)
	}
	n.CgroupRoot = fmt.Sprintf("/sys/fs/cgroup/devices/hpmount-sim-%d", rand.Uint32())
	if err := os.MkdirAll(filepath.Join(n.CgroupRoot, "kubepods"), 0o755); err != nil {
		n.Close()
		return nil, fmt.Errorf("device cgroup %q: %w", n.CgroupRoot, err)
	}
	n.defer_(func() { removeCgroupTree(n.CgroupRoot) })
	return n, nil
}

func (n *Node) defer_(f func()) { n.cleanups = append(n.cleanups, f) }

// Close undoes everything, newest first.
func (n *Node) Close() {
	for i := len(n.cleanups) - 1; i >= 0; i-- {
		n.cleanups[i]()
	}
	n.cleanups = nil
}

// Path joins parts below the kubelet root.
func (n *Node) Path(parts ...string) string {
	return filepath.Join(append([]string{n.KubeletRoot}, parts...)...)
}

// Disk is a loop device over a sparse file, with or without a filesystem.
type Disk struct {
	Device, Backing, FSType string
	node                    *Node
}

// NewDisk attaches a loop device of size bytes and makes fstype on it
// ("ext4", "xfs", or "" for a raw block volume).
func (n *Node) NewDisk(name, fstype string, size int64) (*Disk, error) {
	backing := filepath.Join(n.dir, "disks", name+".img")
	if err := os.MkdirAll(filepath.Dir(backing), 0o755); err != nil {
		return nil, err
	}
	dev, err := sandbox.NewLoop(backing, size)
	if err != nil {
		return nil, err
	}
	d := &Disk{Device: dev, Backing: backing, FSType: fstype, node: n}
	n.defer_(func() { sandbox.DetachLoop(dev) })
	return d, sandbox.Mkfs(dev, fstype)
}

// Grow enlarges the disk as a storage backend expanding the volume would.
func (d *Disk) Grow(size int64) error { return sandbox.GrowLoop(d.Device, d.Backing, size) }

// Rdev is the disk's device number.
func (d *Disk) Rdev() (major, minor uint32, err error) {
	var st unix.Stat_t
	if err := unix.Stat(d.Device, &st); err != nil {
		return 0, 0, err
	}
	return unix.Major(st.Rdev), unix.Minor(st.Rdev), nil
}

// CSIMountDir is where the kubelet publishes a filesystem volume for a pod.
func (n *Node) CSIMountDir(podUID, pv string) string {
	return n.Path("pods", podUID, "volumes", "kubernetes.io~csi", pv, "mount")
}

// PublishFilesystem mounts d at the pod's CSI publish path, as NodeStage and
// NodePublish do, and creates a sparse disk.img of imageSize bytes if it is
// missing, as KubeVirt does for a filesystem-mode PVC.
func (n *Node) PublishFilesystem(podUID, pv string, d *Disk, imageSize int64) error {
	dir := n.CSIMountDir(podUID, pv)
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return err
	}
	if err := unix.Mount(d.Device, dir, d.FSType, 0, ""); err != nil {
		return fmt.Errorf("mount %s on %q: %w", d.Device, dir, err)
	}
	n.defer_(func() { unix.Unmount(dir, unix.MNT_DETACH) })
	img := filepath.Join(dir, "disk.img")
	if _, err := os.Stat(img); errors.Is(err, os.ErrNotExist) {
		f, err := os.OpenFile(img, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o660)
		if err != nil {
			return err
		}
		err = f.Truncate(imageSize)
		f.Close()
		return err
	}
	return nil
}

// UnpublishFilesystem is NodeUnpublish and NodeUnstage: the pod's mount goes
// away and its directory is removed, as when the attachment pod is replaced.
//
// An unmount that finds the mount busy is tried again for a while, as the
// kubelet's reconciler retries a failed unmount: the agent looks into the
// publish directory (kubelet.FindPublished, an open beneath it) on every
// reconcile, and an unmount that lands in that instant fails with EBUSY.
// A mount kept busy longer than unmountPatience still fails.
func (n *Node) UnpublishFilesystem(podUID, pv string) error {
	dir := n.CSIMountDir(podUID, pv)
	deadline := time.Now().Add(unmountPatience)
	for {
		err := unix.Unmount(dir, 0)
		if errors.Is(err, unix.EBUSY) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
			continue
		}
		if err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			return fmt.Errorf("unmount %q: %w", dir, err)
		}
		return os.RemoveAll(filepath.Dir(dir))
	}
}

// unmountPatience is how long UnpublishFilesystem retries a busy unmount.
const unmountPatience = 5 * time.Second

// BlockPublishPath is where a CSI driver publishes a block volume for a pod.
func (n *Node) BlockPublishPath(podUID, pv string) string {
	return n.Path("plugins", "kubernetes.io", "csi", "volumeDevices", "publish", pv, podUID)
}

// PublishBlock binds d's device node onto the publish path and links the
// pod's volumeDevices entry to it, as the CSI driver and kubelet do.
func (n *Node) PublishBlock(podUID, pv string, d *Disk) error {
	pub := n.BlockPublishPath(podUID, pv)
	if err := os.MkdirAll(filepath.Dir(pub), 0o750); err != nil {
		return err
	}
	if err := os.WriteFile(pub, nil, 0o600); err != nil {
		return err
	}
	if err := unix.Mount(d.Device, pub, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind %s on %q: %w", d.Device, pub, err)
	}
	n.defer_(func() { unix.Unmount(pub, unix.MNT_DETACH) })
	link := n.Path("pods", podUID, "volumeDevices", "kubernetes.io~csi", pv)
	if err := os.MkdirAll(filepath.Dir(link), 0o750); err != nil {
		return err
	}
	_ = os.Remove(link)
	return os.Symlink(pub, link)
}

// UnpublishBlock removes what PublishBlock made.
func (n *Node) UnpublishBlock(podUID, pv string) error {
	pub := n.BlockPublishPath(podUID, pv)
	if err := unix.Unmount(pub, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
		return fmt.Errorf("unmount %q: %w", pub, err)
	}
	_ = os.Remove(pub)
	return os.Remove(n.Path("pods", podUID, "volumeDevices", "kubernetes.io~csi", pv))
}

// HotplugDisksDir is the launcher's emptyDir that the agent fills.
func (n *Node) HotplugDisksDir(launcherUID string) string {
	return n.Path("pods", launcherUID, "volumes", "kubernetes.io~empty-dir", "hotplug-disks")
}
