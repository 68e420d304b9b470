// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package kubelet owns every fact hpmount relies on about the kubelet's
// directory tree under its root directory (--root-dir, /var/lib/kubelet by
// default):
//
//   - the pods directory and a launcher pod's hotplug-disks emptyDir, with
//     the target names (<volume>.img, <volume> for a block node or a
//     directory volume) hpmount creates in it;
//   - where a filesystem volume is published for a pod
//     (pods/<uid>/volumes/kubernetes.io~csi/<pv>/mount, or
//     pods/<uid>/volumes/kubernetes.io~<plugin>/<pv> for other plugins);
//   - where a block volume is published: the kubelet-made link
//     pods/<uid>/volumeDevices/<plugin>/<pv> to the CSI publish file
//     plugins/kubernetes.io/csi/volumeDevices/publish/<pv>/<uid>;
//   - listing the pods that have a hotplug-disks directory;
//   - the rule for volume names (ValidName: one path component, by
//     isolation.ValidName, short enough for <volume>.img) and the listers
//     of the targets in hotplug-disks (ReadFileTargets, ReadDirTargets);
//   - the one resolution of the root in the host's mount namespace
//     (ResolveRoot): mountinfo spells mount points with symlinks resolved,
//     so a /var/lib/kubelet that is a link must be resolved where the host
//     sees it, not where the caller happens to run.
//
// Every lookup runs in the caller's mount namespace (call it inside the
// host's), beneath the root, with symlinks refused, except the one link the
// kubelet itself makes for a block volume, which is followed only while it
// stays inside the root.
//
// It refuses to mount, create or change anything, and it knows nothing of
// KubeVirt objects: callers pass pod UIDs and PV names.
package kubelet
