package agent

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/blockdev"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/mount"
)

// NodeEngine is the Engine of a real node: mount/ for filesystem volumes,
// blockdev/ for block volumes and device cgroups, all in the host's mount
// namespace.
type NodeEngine struct {
	ns            *isolation.MountNamespace
	mountInfoPath string
	sysRoot       string
	attacher      *mount.Attacher
	grower        *mount.Grower
	nodes         *blockdev.Nodes
	rules         blockdev.DeviceRules
	grow          GrowPolicy
}

// GrowPolicy is what Grow may change.
type GrowPolicy struct {
	Filesystems, DiskImages bool
}

var _ Engine = (*NodeEngine)(nil)

// NodeEngineConfig locates the host's pieces.
type NodeEngineConfig struct {
	MountNamespace string // e.g. /proc/1/ns/mnt
	MountInfo      string // e.g. /proc/1/mountinfo
	KubeletRoot    string // as the host sees it
	CgroupRoot     string
	CgroupMode     string
	SysRoot        string // "/sys"
	DevRoot        string // "/dev"
	// PrivateDir holds the agent's temporary mounts for online growth.
	PrivateDir string
	UID, GID   int
	Grow       GrowPolicy
}

// NewNodeEngine joins the host mount namespace and opens the device-cgroup
// flavour in use.
func NewNodeEngine(c NodeEngineConfig) (*NodeEngine, error) {
	ns, err := isolation.OpenMountNamespace(c.MountNamespace)
	if err != nil {
		return nil, err
	}
	// The host's mountinfo spells mount points with symlinks resolved, so
	// the kubelet root is resolved once, as the host sees it.
	root := c.KubeletRoot
	if err := ns.Do(func() (err error) {
		root, err = filepath.EvalSymlinks(c.KubeletRoot)
		return err
	}); err != nil {
		ns.Close()
		return nil, fmt.Errorf("kubelet root %q in the host namespace: %w", c.KubeletRoot, err)
	}
	rules, err := blockdev.NewDeviceRules(c.CgroupMode, c.CgroupRoot)
	if err != nil {
		ns.Close()
		return nil, err
	}
	return &NodeEngine{
		ns:            ns,
		mountInfoPath: c.MountInfo,
		sysRoot:       c.SysRoot,
		attacher:      &mount.Attacher{NS: ns, KubeletRoot: root, UID: c.UID, GID: c.GID, SysRoot: c.SysRoot},
		grower: &mount.Grower{NS: ns, KubeletRoot: root, SysRoot: c.SysRoot, DevRoot: c.DevRoot,
			PrivateDir: c.PrivateDir},
		nodes: &blockdev.Nodes{NS: ns, KubeletRoot: root, UID: c.UID, GID: c.GID},
		rules: rules,
		grow:  c.Grow,
	}, nil
}

// Close leaves the host namespace. Mounts stay.
func (e *NodeEngine) Close() { e.ns.Close() }

type tableSnapshot struct{ t *mount.Table }

func (s tableSnapshot) Entries() int { return s.t.Len() }

func table(s Snapshot) (*mount.Table, error) {
	ts, ok := s.(tableSnapshot)
	if !ok || ts.t == nil {
		return nil, fmt.Errorf("snapshot %T is not a mount table", s)
	}
	return ts.t, nil
}

// Snapshot reads the host's mountinfo once.
func (e *NodeEngine) Snapshot(ctx context.Context) (Snapshot, error) {
	t, err := mount.ReadTable(e.mountInfoPath)
	if err != nil {
		return nil, err
	}
	return tableSnapshot{t}, nil
}

// hotplugDisksDir is the launcher's emptyDir, relative to the kubelet root.
func hotplugDisksDir(launcher types.UID) string {
	return mount.HotplugDisksDir(string(launcher))
}

// Observe lists the launcher's file binds and block nodes.
func (e *NodeEngine) Observe(ctx context.Context, s Snapshot, launcher types.UID) ([]ObservedVolume, error) {
	t, err := table(s)
	if err != nil {
		return nil, err
	}
	dir := hotplugDisksDir(launcher)
	files, err := e.attacher.Observe(t, dir)
	if err != nil {
		return nil, err
	}
	var out []ObservedVolume
	for _, f := range files {
		out = append(out, ObservedVolume{Name: f.Name, Mode: Filesystem, Mounted: f.Mounted, Stacked: f.Depth,
			SourceDev: f.Dev, SourceRoot: f.Root, SourceGone: f.SourceGone})
	}
	nodes, err := e.nodes.Observe(dir)
	if err != nil {
		return nil, err
	}
	for _, n := range nodes {
		out = append(out, ObservedVolume{Name: n.Name, Mode: Block, DeviceMajor: n.Device.Major, DeviceMinor: n.Device.Minor})
	}
	return out, nil
}

// Attach bind-mounts a filesystem volume's disk.img, or makes and allows a
// block volume's node.
func (e *NodeEngine) Attach(ctx context.Context, s Snapshot, v DesiredVolume) (Change, error) {
	t, err := table(s)
	if err != nil {
		return Unchanged, err
	}
	if v.Mode == Block {
		return e.attachBlock(v)
	}
	src, err := e.attacher.FindPublished(string(v.Source.AttachmentPodUID), v.Source.PVName)
	if errors.Is(err, mount.ErrNotPublished) {
		return Unchanged, fmt.Errorf("%w: %w", ErrNotPublished, err)
	}
	if err != nil {
		return Unchanged, err
	}
	r, err := e.attacher.Attach(t, src, hotplugDisksDir(v.LauncherUID), v.Name)
	return fileChange(r), err
}

func (e *NodeEngine) attachBlock(v DesiredVolume) (Change, error) {
	p, err := e.nodes.PublishedDevice(string(v.Source.AttachmentPodUID), v.Source.PVName)
	if errors.Is(err, blockdev.ErrNotPublished) {
		return Unchanged, fmt.Errorf("%w: %w", ErrNotPublished, err)
	}
	if err != nil {
		return Unchanged, err
	}
	launcher := string(v.LauncherUID)
	// The rule goes in before the node appears, so the launcher never sees
	// a node it cannot open.
	allowed, err := e.rules.Allowed(launcher, p.Device)
	if err != nil {
		return Unchanged, err
	}
	if !allowed {
		if err := e.rules.Allow(launcher, p.Device); err != nil {
			return Unchanged, err
		}
	}
	r, old, err := e.nodes.Ensure(hotplugDisksDir(v.LauncherUID), v.Name, p)
	if err != nil {
		return Unchanged, err
	}
	if r == blockdev.Replaced && old != p.Device {
		if err := e.denyUnlessUsed(v.LauncherUID, old); err != nil {
			return Replaced, err
		}
	}
	switch {
	case r == blockdev.Created:
		return Created, nil
	case r == blockdev.Replaced:
		return Replaced, nil
	case !allowed:
		// Node in place but its rule was lost, e.g. the runtime rewrote the
		// cgroup's device program.
		return Created, nil
	}
	return Unchanged, nil
}

// Detach unmounts and removes a filesystem volume's target, or removes a
// block node and its cgroup rule.
func (e *NodeEngine) Detach(ctx context.Context, s Snapshot, launcher types.UID, o ObservedVolume) (Change, error) {
	t, err := table(s)
	if err != nil {
		return Unchanged, err
	}
	dir := hotplugDisksDir(launcher)
	if o.Mode != Block {
		r, err := e.attacher.Detach(t, dir, o.Name)
		return fileChange(r), err
	}
	r, dev, err := e.nodes.Remove(dir, o.Name)
	if err != nil || r != blockdev.Removed {
		return Unchanged, err
	}
	return Removed, e.denyUnlessUsed(launcher, dev)
}

// denyUnlessUsed drops the launcher's rule for dev unless another of its
// nodes still points at dev. A launcher whose cgroup is gone needs nothing.
func (e *NodeEngine) denyUnlessUsed(launcher types.UID, dev blockdev.Device) error {
	nodes, err := e.nodes.Observe(hotplugDisksDir(launcher))
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if n.Device == dev {
			return nil
		}
	}
	err = e.rules.Deny(string(launcher), dev)
	if errors.Is(err, blockdev.ErrPodCgroupNotFound) {
		return nil
	}
	return err
}

// Grow checks and grows a filesystem volume online; for a block volume it
// reports the device size.
func (e *NodeEngine) Grow(ctx context.Context, s Snapshot, v DesiredVolume) (GrowResult, error) {
	t, err := table(s)
	if err != nil {
		return GrowResult{}, err
	}
	dir := hotplugDisksDir(v.LauncherUID)
	if v.Mode == Block {
		return e.blockSize(dir, v.Name)
	}
	r, err := e.grower.Grow(t, dir, v.Name, mount.GrowOptions{
		GrowFilesystem:     e.grow.Filesystems,
		ExpandDiskImage:    e.grow.DiskImages,
		CapacityBytes:      v.CapacityBytes,
		FilesystemOverhead: v.FilesystemOverhead,
	})
	return GrowResult{
		DeviceBytes:      r.DeviceBytes,
		FilesystemBefore: r.FilesystemBefore,
		FilesystemAfter:  r.FilesystemAfter,
		DiskImageBefore:  r.DiskImageBefore,
		DiskImageAfter:   r.DiskImageAfter,
		FilesystemType:   r.FSType,
		Grown:            r.Grown,
		ImageGrown:       r.ImageGrown,
	}, err
}

func (e *NodeEngine) blockSize(dir, name string) (GrowResult, error) {
	nodes, err := e.nodes.Observe(dir)
	if err != nil {
		return GrowResult{}, err
	}
	for _, n := range nodes {
		if n.Name == name {
			size, err := mount.BlockDeviceSize(e.sysRoot, n.Device.Major, n.Device.Minor)
			return GrowResult{DeviceBytes: size}, err
		}
	}
	return GrowResult{}, fmt.Errorf("block node %q not found in %q", name, dir)
}

// Launchers lists the pod directories whose hotplug-disks holds an entry.
func (e *NodeEngine) Launchers(ctx context.Context, s Snapshot) ([]types.UID, error) {
	var uids []types.UID
	err := e.ns.Do(func() error {
		dirs, err := mount.LauncherDirs(e.attacher.KubeletRoot)
		for _, d := range dirs {
			if !d.Empty {
				uids = append(uids, types.UID(d.UID))
			}
		}
		return err
	})
	return uids, err
}

func fileChange(r mount.Result) Change {
	switch r {
	case mount.Mounted:
		return Mounted
	case mount.Replaced:
		return Replaced
	case mount.Removed:
		return Removed
	}
	return Unchanged
}
