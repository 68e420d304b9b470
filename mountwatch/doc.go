// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package mountwatch tells, as it happens, which launchers' hotplug-disks
// a mount was attached to or detached from in the host's mount namespace,
// so that a foreign unmount of a target, or a mount stacked on one, wakes
// the agent at once instead of at its next resync.
//
// It owns the kernel's mount notifications (Linux ≥ 6.15: fanotify with
// FAN_REPORT_MNT, a FAN_MARK_MNTNS mark on the namespace's file,
// FAN_MNT_ATTACH and FAN_MNT_DETACH events carrying the 64-bit unique
// mount id) and the one map that makes a detach meaningful: a detached
// mount no longer exists, so its mount point cannot be asked for. The
// watcher keeps, for the mounts that concern a launcher, the launcher's
// UID by unique mount id; it is seeded at Open with listmount(2) and
// statmount(2) in the host's namespace (through package mountinfo, which
// owns that ABI) and kept current from attach events. Only mounts on a
// launcher's hotplug-disks, beneath it, or on a directory between the pod
// directory and it are kept: a node's tens of thousands of other mounts
// cost one statmount each at start and nothing after.
//
// A kernel without mount notifications makes Open fail with an error
// wrapping errors.ErrUnsupported; the agent then runs on its periodic
// resync alone. Lost events (the kernel's queue overflowed) are reported
// as such, never guessed at, and the map is read again.
//
// It refuses everything else: it mounts nothing, judges nothing about a
// mount (that is package mount's, through the engine's observation), and
// knows of the kubelet's layout only through package kubelet.
package mountwatch
