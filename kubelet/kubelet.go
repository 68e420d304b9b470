// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package kubelet

import (
	"errors"
	"path"
	"strings"

	"github.com/hpmount/hpmount/isolation"
)

// DefaultRoot is the kubelet's default --root-dir.
const DefaultRoot = "/var/lib/kubelet"

// MaxVolumeNameLen bounds a volume name: <name>.img must stay a short,
// single path component in hotplug-disks.
const MaxVolumeNameLen = 200

// maxComponentLen bounds a pod UID or a PV name as a directory name.
const maxComponentLen = isolation.MaxNameLen

// HotplugDisksVolume is the name of the launcher's emptyDir volume that
// hpmount fills; KubeVirt names it so.
const HotplugDisksVolume = "hotplug-disks"

// csiPlugin is the kubelet's directory for CSI volumes; it adds a "mount"
// level below the volume name that other plugins do not have.
const csiPlugin = "kubernetes.io~csi"

// ErrNotPublished means the kubelet has not (or no longer) published the
// volume for the pod. For a volume whose launcher target is already healthy
// it is the normal state after the attachment pod was replaced.
var ErrNotPublished = errors.New("volume is not published for the pod")

// Root is the kubelet root directory as the host's mount namespace sees it.
type Root struct {
	// Path is absolute with every symlink resolved: the spelling of the
	// host's mountinfo and the directory every lookup starts from.
	Path string
	// Configured is the path the kubelet was configured with (and so
	// writes into its links); it equals Path unless the root is a link.
	Configured string
}

// Abs joins a path relative to the root onto Path.
func (r Root) Abs(rel string) string { return path.Join(r.Path, rel) }

// PodsDir is the kubelet's pods directory, relative to the root.
const PodsDir = "pods"

// HotplugDisksDir is a launcher pod's hotplug-disks emptyDir, relative to
// the root.
func HotplugDisksDir(launcherUID string) string {
	return path.Join(PodsDir, launcherUID, "volumes", "kubernetes.io~empty-dir", HotplugDisksVolume)
}

// VolumesDir is a pod's volumes directory, relative to the root.
func VolumesDir(podUID string) string { return path.Join(PodsDir, podUID, "volumes") }

// VolumeDevicesDir is a pod's volumeDevices directory, relative to the
// root: one entry per plugin, holding one link per block volume.
func VolumeDevicesDir(podUID string) string { return path.Join(PodsDir, podUID, "volumeDevices") }

// CSIPublishFile is the file on which the CSI driver bind-mounts the device
// node of block volume pv for pod podUID, relative to the root.
func CSIPublishFile(pv, podUID string) string {
	return path.Join("plugins/kubernetes.io/csi/volumeDevices/publish", pv, podUID)
}

// TargetName is the file name of a filesystem volume's target in
// hotplug-disks: <volume>.img.
func TargetName(volume string) string { return volume + ".img" }

// NodeTargetName is the name of a block volume's device node in
// hotplug-disks: the volume's name, where QEMU opens it.
func NodeTargetName(volume string) string { return volume }

// FileTargetVolume is TargetName's inverse: the volume whose filesystem
// target is the entry file of hotplug-disks, and whether file is named as
// one.
func FileTargetVolume(file string) (string, bool) { return strings.CutSuffix(file, ".img") }

// DirTargetName is the name of a directory volume's target in
// hotplug-disks (a memory-dump or utility volume): the volume's name, a
// directory onto which the PVC's mount root is bound, as KubeVirt's
// virt-handler makes it.
func DirTargetName(volume string) string { return volume }

// ValidName refuses a volume name that cannot be one plain file name in
// hotplug-disks (isolation.ValidName), or is too long for <name>.img to
// stay short. The names come from the VMI, which a tenant writes; a
// refusal wraps isolation.ErrUnsafePath.
func ValidName(name string) error {
	return isolation.ValidName("volume name", name, MaxVolumeNameLen)
}

// validPodVolume validates a pod UID and a PV name before they become
// path components.
func validPodVolume(podUID, pvName string) error {
	if err := isolation.ValidName("pod uid", podUID, maxComponentLen); err != nil {
		return err
	}
	return isolation.ValidName("volume name", pvName, maxComponentLen)
}

// LauncherDir is a pod directory that has a hotplug-disks emptyDir.
type LauncherDir struct {
	UID string
	// Empty says the directory holds nothing: no target file, no node.
	Empty bool
}

// MaxTargets bounds how many entries of one hotplug-disks directory are
// looked at: far more hotplug volumes than KubeVirt lets a VMI have, far
// fewer than the names a tenant could create there.
const MaxTargets = 1024

// IsTargetName reports whether name could be an entry hpmount makes in
// hotplug-disks: a valid volume name (a block node or a directory target,
// ".img" included), or one with ".img" appended (a file target).
func IsTargetName(name string) bool {
	return ValidName(name) == nil || ValidName(strings.TrimSuffix(name, ".img")) == nil
}

// HotplugTargetOf is the launcher pod and the entry name of a target path
// under any kubelet root, ".../pods/<uid>/volumes/kubernetes.io~empty-dir/
// hotplug-disks/<name>", as another component spells it in its own view
// of the pods directory; ok is false for any other path.
func HotplugTargetOf(p string) (launcherUID, name string, ok bool) {
	dir, name := path.Split(path.Clean(p))
	parts := strings.Split(strings.TrimSuffix(dir, "/"), "/")
	if len(parts) < 5 || !IsTargetName(name) {
		return "", "", false
	}
	tail := parts[len(parts)-5:]
	uid := tail[1]
	if tail[0] != PodsDir || isolation.ValidName("pod uid", uid, maxComponentLen) != nil ||
		path.Join(tail[1:]...) != HotplugDisksDir(uid)[len(PodsDir)+1:] {
		return "", "", false
	}
	return uid, name, true
}
