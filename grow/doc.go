// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package grow owns the online growth of filesystem-mode hotplug volumes:
// it closes the gap the built-in mounter leaves after an attachment pod is
// replaced.
//
// When a second volume is hotplugged, KubeVirt replaces the attachment pod
// and the kubelet unpublishes and unstages the first PVC from it. No CSI
// NodeExpandVolume will run for that PVC again: if it is expanded, its
// block device grows but its filesystem does not. The launcher's file bind
// of disk.img still holds that filesystem's superblock, so a Grower finds
// it from the launcher's <vol>.img alone (mount id -> mountinfo ->
// major:minor) and, when its device has grown by more than SlackBytes,
// grows it with the filesystem's own online-resize ioctl
// (XFS_IOC_FSGROWFSDATA, EXT4_IOC_RESIZE_FS) made on a descriptor of that
// very verified bind, with no help from the attachment pod. It enlarges
// disk.img too, sparsely, to KubeVirt's size for the claim
// (mount.DiskImageSize), when told to. Measure is the same look without
// any change, for diag.
//
// Nothing is mounted and nothing is exec'd for it. An agent killed in the
// middle of a growth leaves only what the kernel finishes or undoes on its
// own: an open file descriptor, closed with the process. Earlier versions
// mounted the device again under a private directory and ran xfs_growfs or
// resize2fs there, which a SIGKILL between mount and unmount left mounted
// for good; Sweep still removes such leftovers after an upgrade.
//
// It never shrinks a filesystem or a disk.img, never truncates or deletes
// a disk.img, grows nothing through a read-only superblock or bind, and
// refuses a target that is not a mount of a regular file whose source is
// still linked and whose block device is the one its mount names
// (ErrRefused). It owns no rule of the launcher's directory: hotplug-disks
// is opened and judged by package mount (InLauncherDirLive, ValidTarget),
// as a bind's is; a filesystem's usage and disk.img's size are mount's
// (FilesystemSizeOf, DiskImageSize), a device's size blockdev's
// (DeviceSize). Where a launcher's hotplug-disks is and what a target is
// called are the kubelet package's answers, handed in by the caller (the
// engine, node).
package grow
