// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package propagation checks the mount propagation that hotplug relies on and
// explains, with the fix, what is wrong when it is missing.
//
// The agent bind-mounts disk images into a launcher's hotplug-disks emptyDir
// in the host mount namespace. They reach the launcher only if the host
// mount holding the kubelet pods directory is shared and the launcher's view
// of the emptyDir (mountPropagation: HostToContainer) is a slave of that
// mount's peer group. Both facts are read from mountinfo tables. Reached
// then confirms the end of the chain: a launcher's own processes, looked at
// through /proc/<pid>/root, see under a target's name the very file the
// host mounted, and reports the launcher's own bind there (its mount and
// file). LauncherView.Held asks the launcher's QEMU what it holds of a
// target: a descriptor is the volume's only when its link names the target,
// or when it is on a bind the launcher had there before and holds that
// bind's file (a replaced bind is detached under QEMU's descriptor, whose
// link then reads "/"). This package mounts nothing and changes nothing.
package propagation
