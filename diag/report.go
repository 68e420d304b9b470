// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"errors"
	"fmt"

	"github.com/hpmount/hpmount/diag/storage"
)

// APIVersion is the schema version of a Report in JSON and YAML.
const APIVersion = "hpmount.io/diag/v1"

// Exit codes of `hpmount diag`.
const (
	ExitOK        = 0 // every volume is ok and nothing is orphaned
	ExitProblems  = 1 // at least one volume or orphan needs attention
	ExitCannotRun = 2 // the diagnosis could not be made
)

// Verdict is the conclusion about one volume or orphan.
type Verdict string

// Verdicts, in the order they take precedence for one volume.
// docs/diag.md explains each one and its hint.
const (
	Refused           Verdict = "refused"
	Stuck             Verdict = "stuck"
	DeadSource        Verdict = "dead-source"
	Error             Verdict = "error"
	PropagationBroken Verdict = "propagation-broken"
	NotMounted        Verdict = "not-mounted"
	StaleSource       Verdict = "stale-source"
	Stacked           Verdict = "stacked"
	NotPropagated     Verdict = "not-propagated"
	StaleOpen         Verdict = "stale-open"
	WrongDevice       Verdict = "wrong-device"
	NotAllowed        Verdict = "not-allowed"
	NeedsFSExpand     Verdict = "needs-fs-expand"
	ExpandPending     Verdict = "expand-pending"
	NotOpen           Verdict = "not-open"
	OK                Verdict = "ok"
	Orphan            Verdict = "orphan"
	LeftToHandler     Verdict = "left-to-virt-handler"
)

// Verdicts is every verdict, in the order above: the vocabulary that
// docs/diag.md's verdict table explains, held to it by a test.
var Verdicts = []Verdict{
	Refused, Stuck, DeadSource, Error, PropagationBroken, NotMounted, StaleSource, Stacked, NotPropagated,
	StaleOpen, WrongDevice, NotAllowed, NeedsFSExpand, ExpandPending, NotOpen, OK, Orphan, LeftToHandler,
}

// Report is the result of one diagnosis of a node.
type Report struct {
	APIVersion string `json:"apiVersion"`
	Node       string `json:"node"`
	// KubeletRoot is the kubelet root the paths were resolved under.
	KubeletRoot string `json:"kubeletRoot"`
	// MountSource says how the mount table was read: "findmnt" or
	// "mountinfo".
	MountSource string `json:"mountSource"`
	// Propagation is the check of the kubelet pods directory.
	Propagation PropagationCheck `json:"propagation"`
	Volumes     []Volume         `json:"volumes"`
	Orphans     []OrphanEntry    `json:"orphans"`
	// Problems counts volumes whose verdict is not ok, plus orphans (not
	// the entries left to virt-handler).
	Problems int `json:"problems"`
	// Storage says which storage-side objects (VolumeAttachments, Longhorn)
	// could be read.
	Storage storage.Sources `json:"storage"`
	// Warnings are limits of this run that did not stop it, e.g. orphans
	// not searched because VMIs of other namespaces could not be listed.
	Warnings []string `json:"warnings,omitempty"`
}

// PropagationCheck is propagation.CheckShared on <kubeletRoot>/pods.
type PropagationCheck struct {
	Path   string `json:"path"`
	Shared bool   `json:"shared"`
	// MountPoint and Mode describe the mount the path lives on.
	MountPoint string `json:"mountPoint,omitempty"`
	Mode       string `json:"mode,omitempty"`
	Error      string `json:"error,omitempty"`
}

// Volume is everything found about one hotplug volume of a VMI.
type Volume struct {
	Namespace string `json:"namespace"`
	VMI       string `json:"vmi"`
	Volume    string `json:"volume"`
	Claim     string `json:"claim,omitempty"`
	PVName    string `json:"pvName,omitempty"`
	// Mode is "Filesystem", "Block" or "Directory" (a memory-dump or
	// utility volume, bound as the directory <volume>).
	Mode string `json:"mode"`
	// Phase and Reason are from the VMI's status.volumeStatus.
	Phase  string `json:"phase,omitempty"`
	Reason string `json:"reason,omitempty"`
	// Migration is this node's side of the VMI's last live migration, as
	// the agent reads it: "source running (node-1 -> node-2, migration
	// <uid>)", "target failed (...)"; empty without one.
	Migration     string  `json:"migration,omitempty"`
	LauncherPod   *PodRef `json:"launcherPod,omitempty"`
	AttachmentPod *PodRef `json:"attachmentPod,omitempty"`
	// ExpectedSource is the host path of what should be mounted or
	// mknod'ed: the attachment pod's disk.img or published block device.
	ExpectedSource string `json:"expectedSource,omitempty"`
	// Target is the host path of <volume>.img (Filesystem) or <volume>
	// (Block, Directory) in the launcher's hotplug-disks directory.
	Target string       `json:"target,omitempty"`
	Mount  *MountEntry  `json:"mount,omitempty"`
	Device *DeviceCheck `json:"device,omitempty"`
	// QEMU is what the launcher's QEMU holds of the target: "open",
	// "not-open", "stale-open", or "no QEMU found" with why; empty when
	// not asked (nothing mounted, or no launcher).
	QEMU       string  `json:"qemu,omitempty"`
	QEMUDetail string  `json:"qemuDetail,omitempty"`
	Sizes      Sizes   `json:"sizes"`
	Verdict    Verdict `json:"verdict"`
	// RefusalReason is the refused verdict's reason code: the reason label
	// the agent counts the same refusal under in hpmount_refusals_total.
	RefusalReason string `json:"refusalReason,omitempty"`
	// Hint says what to do about a verdict other than ok, in one line.
	Hint string `json:"hint,omitempty"`
	// Detail is the underlying finding or error, verbatim.
	Detail string `json:"detail,omitempty"`
	// Storage is what attaches the volume's PV to the node: its
	// VolumeAttachments and its Longhorn volume (package storage); absent
	// when nothing is known.
	Storage *storage.Side `json:"storage,omitempty"`
	// LastAttach is the volume's last attach the agent timed, phase by
	// phase, from the Events on the VMI; absent when none is known.
	LastAttach *LastAttach `json:"lastAttach,omitempty"`
}

// PodRef names a pod; Publishes is set for an attachment pod and says
// whether the kubelet still publishes the volume for it.
type PodRef struct {
	Name      string `json:"name,omitempty"`
	UID       string `json:"uid"`
	Publishes *bool  `json:"publishes,omitempty"`
}

// MountEntry is one mount as findmnt shows it.
type MountEntry struct {
	ID     int    `json:"id"`
	Source string `json:"source"`
	FSRoot string `json:"fsRoot"`
	Target string `json:"target"`
	FSType string `json:"fsType"`
	// MajMin is the filesystem's device, "MAJ:MIN".
	MajMin      string `json:"majMin"`
	Propagation string `json:"propagation"`
	// Stacked is how many mounts are on Target (1 is normal).
	Stacked int `json:"stacked"`
}

// DeviceCheck is the block-mode part of a volume.
type DeviceCheck struct {
	// Node is the device the node in hotplug-disks points at, "MAJ:MIN".
	Node string `json:"node,omitempty"`
	// Published is the device the kubelet published for the attachment
	// pod, "MAJ:MIN".
	Published string `json:"published,omitempty"`
	// CgroupAllowed says whether the launcher's device cgroup allows
	// Node; absent when it could not be checked.
	CgroupAllowed *bool `json:"cgroupAllowed,omitempty"`
}

// Sizes are in bytes; 0 means not known or not measured.
type Sizes struct {
	// PVCCapacity is status.volumeStatus[].persistentVolumeClaimInfo.capacity.
	PVCCapacity int64 `json:"pvcCapacity,omitempty"`
	// BlockDevice is the size of the device under the volume.
	BlockDevice int64 `json:"blockDevice,omitempty"`
	// Filesystem is the filesystem's own size (ext superblock, xfs
	// geometry), the figure compared with BlockDevice.
	Filesystem int64 `json:"filesystem,omitempty"`
	// FilesystemStatfs is f_blocks*f_bsize seen through the target, as df
	// shows it.
	FilesystemStatfs int64 `json:"filesystemStatfs,omitempty"`
	// DiskImage is disk.img's apparent size.
	DiskImage int64 `json:"diskImage,omitempty"`
}

// OrphanEntry is a mount or block node in a launcher's hotplug-disks
// directory that no VMI on this node wants.
type OrphanEntry struct {
	// LauncherPodUID is the pod directory the entry was found in;
	// LauncherPod is "namespace/name" when the pod is known.
	LauncherPodUID string `json:"launcherPodUID"`
	LauncherPod    string `json:"launcherPod,omitempty"`
	Name           string `json:"name"`
	// Kind is "mount" or "block-node".
	Kind    string      `json:"kind"`
	Target  string      `json:"target"`
	Mount   *MountEntry `json:"mount,omitempty"`
	Device  string      `json:"device,omitempty"`
	Verdict Verdict     `json:"verdict"`
	Hint    string      `json:"hint"`
}

// CannotRunError is returned by Run when no diagnosis could be made: bad
// options, an unreachable API server, an unreadable mount table.
type CannotRunError struct {
	Op  string
	Err error
}

func (e *CannotRunError) Error() string { return e.Op + ": " + e.Err.Error() }
func (e *CannotRunError) Unwrap() error { return e.Err }

func cannotRun(op string, err error) error { return &CannotRunError{Op: op, Err: err} }

func cannotRunf(op, format string, args ...any) error {
	return &CannotRunError{Op: op, Err: fmt.Errorf(format, args...)}
}

// ExitCode maps the result of Run to the command's exit status.
func ExitCode(r *Report, err error) int {
	switch {
	case err != nil:
		return ExitCannotRun
	case r == nil:
		return ExitCannotRun
	case r.Problems > 0:
		return ExitProblems
	}
	return ExitOK
}

// IsCannotRun reports whether err is a *CannotRunError.
func IsCannotRun(err error) bool {
	var c *CannotRunError
	return errors.As(err, &c)
}

// countProblems counts the volumes not ok and the orphans; an entry left
// to virt-handler is its to remove, not a problem.
func (r *Report) countProblems() {
	r.Problems = 0
	for _, o := range r.Orphans {
		if o.Verdict == Orphan {
			r.Problems++
		}
	}
	for _, v := range r.Volumes {
		if v.Verdict != OK {
			r.Problems++
		}
	}
}
