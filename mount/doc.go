// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package mount owns filesystem-mode hotplug volumes: validating a PVC's
// disk.img, bind-mounting it onto its target file in the launcher's
// hotplug-disks directory and unmounting it.
//
// Directory volumes (memory-dump and utility volumes) are bound the same
// careful way, but as a directory: the PVC's mount root onto a directory in
// hotplug-disks (AttachDir, DetachDir, ObserveDirs), never recursively, and
// the bind made private so that nothing mounted inside the PVC follows it.
// CreateDiskImage makes a missing disk.img, exclusively, sparse and of
// KubeVirt's size, when the agent is told to (ErrNoDiskImage otherwise).
//
// The kernel's mountinfo is the only record of what is mounted. A
// mountinfo.Table read by the caller (the node's whole table for a batch,
// or one launcher's mounts from statmount(2)) answers whether a target is
// mounted, from which device and root, whether mounts are stacked on it,
// and whether the mounted file's source is gone. Right after each bind's
// move_mount, statmount says what the new mount landed on: a bind that
// landed on a mount another mounter made on the target meanwhile is undone
// at once (ErrLandedOnAnother), before its copy inside the publish mount
// can stop the volume from being attached again.
//
// Observe's look takes the attributes the kernel cached, so it keeps
// answering for storage that stopped answering long ago. OpenBound and
// Answers are the one look that reaches the storage (a forced statx of
// what is bound on a target); the caller runs Answers where a hang holds
// nothing else.
//
// The read-only looks at a volume that diag makes through the engine's
// view are the attach's own: CheckImage with Image.Shows (is the bind the
// published image), CheckTarget and CheckDirTarget (the target's kind,
// and whether an unmounted directory is one the agent may use).
//
// Online growth of what a file bind holds is package grow's: it reaches
// the launcher's directory through InLauncherDirLive and checks target names
// with ValidTarget, so that the rules of both stay here.
//
// A launcher's hotplug-disks is used only as the kubelet makes it: a plain
// directory on the pods directory's mount, or a whole tmpfs of its own
// mounted on it (a memory-medium emptyDir). A bind of a host path there or
// on a directory above it in the pod directory is refused as unsafe
// content before anything is created, mounted or chowned in it. The rule
// has one owner, here, beside the mount table it is judged against: block
// volumes reach hotplug-disks through InLauncherDir, which hands blockdev
// the checked descriptor, and Uncover removes whatever is mounted on a
// block node's name (never hpmount's) without touching what is bound.
// WithLauncherDir judges the directory once for several looks in one call
// (the agent's listing of a launcher): each look opens it again from the
// judged descriptor.
//
// It refuses kubelet paths and names of its own: where a volume is
// published, where a launcher's hotplug-disks is, and what a volume's
// target there is called (<volume>.img, <volume>) are the kubelet
// package's answers, handed in by the caller as directories relative to
// the kubelet root and as target names, which mount only checks to be one
// plain file name (isolation.ValidName); which entries of hotplug-disks
// are targets is the caller's Lister's answer. It imports neither kubelet
// nor kubevirt.
package mount
