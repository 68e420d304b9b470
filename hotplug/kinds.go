// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package hotplug

import (
	"slices"

	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/kubevirt"
)

// Kind is what the control loop, the engine, diag and metrics know of one
// kind of hotplug volume, the volumes of one mode (DesiredVolume.Mode,
// ObservedVolume.Mode). They ask it, never the mode, so that a new kind is
// an entry here and the engine's and diag's halves of it (test/README.md,
// "A new volume kind"). How the engine attaches, detaches, observes and
// grows a kind is the engine's own half (package engine's kinds).
type Kind struct {
	// Mode is the kind's volume mode. Its string is the value the kind
	// adds to the metrics' mode label.
	Mode kubevirt.VolumeMode
	// Short names the kind in the MODE column of diag's table.
	Short string
	// Target names a volume's target in the launcher's hotplug-disks, by
	// the kubelet package's rule.
	Target func(volume string) string
	// Bound: the target is a bind mount, healthy while exactly one live
	// mount is on it, and the launcher is asked whether it sees it.
	// Otherwise the target is a node nothing may be mounted on.
	Bound bool
	// Growth is what a growth check of a healthy volume does.
	Growth Growth
	// DeviceRule: the launcher reaches the volume through a device-cgroup
	// rule that other writers rewrite while the target stays (kubevirt#7710),
	// so a healthy volume is verified at every resync and whenever its
	// launcher's rules were rewritten, and a verify that allowed the device
	// again (outcome.Created) is a rule restored. diag reads the rule.
	DeviceRule bool
	// QEMUOpens: QEMU opens the target as a disk, so whether it holds the
	// volume's current file or device is asked (stale-open, not-open).
	QEMUOpens bool
}

// Growth is what a growth check does for a kind.
type Growth int

const (
	// NoGrowth: the volume has nothing to size (a directory volume has no
	// disk.img) and is never checked.
	NoGrowth Growth = iota
	// GrowsFilesystem: the filesystem under the bind is grown online
	// once its device grew, and diag measures it; checked while growing
	// filesystems is on.
	GrowsFilesystem
	// ReportsSize: the device's size is reported, nothing is grown;
	// always checked.
	ReportsSize
)

// kinds is the table: one entry per kind, in the order the engine lists a
// launcher's entries (binds of files, then of directories, then nodes).
var kinds = []Kind{
	{Mode: kubevirt.Filesystem, Short: "fs", Target: kubelet.TargetName, Bound: true, Growth: GrowsFilesystem, QEMUOpens: true},
	{Mode: kubevirt.Directory, Short: "dir", Target: kubelet.DirTargetName, Bound: true},
	{Mode: kubevirt.Block, Short: "block", Target: kubelet.NodeTargetName, Growth: ReportsSize, DeviceRule: true, QEMUOpens: true},
}

// Kinds lists every kind, in the table's order.
func Kinds() []Kind { return slices.Clone(kinds) }

// KindOf is the kind of mode; ok is false for a mode no kind has (the
// zero Kind: not bound, never grown, no rule).
func KindOf(mode kubevirt.VolumeMode) (k Kind, ok bool) {
	i := slices.IndexFunc(kinds, func(k Kind) bool { return k.Mode == mode })
	if i < 0 {
		return Kind{}, false
	}
	return kinds[i], true
}

// GrowthChecked reports whether a healthy volume of the kind gets growth
// checks, given whether growing filesystems is on.
func (k Kind) GrowthChecked(growFilesystems bool) bool {
	return k.Growth == ReportsSize || k.Growth == GrowsFilesystem && growFilesystems
}
