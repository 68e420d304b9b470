// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mountwatch

import (
	"path"
	"strings"

	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubelet"
)

// maxUIDLen bounds a pod UID taken from a mount point; a UID is 36 bytes,
// a path component at most 255.
const maxUIDLen = 255

// Change is what one batch of mount events touched.
type Change struct {
	// Launchers are the UIDs of the launcher pods whose hotplug-disks (or
	// a directory above it in the pod's directory) a mount was attached to
	// or detached from, each once.
	Launchers []string
	// Lost: the kernel dropped events, so any launcher may have changed.
	Lost bool
}

// Empty reports whether the change names nothing.
func (c Change) Empty() bool { return len(c.Launchers) == 0 && !c.Lost }

// launcherOf returns the pod UID whose hotplug-disks the mount point
// concerns: a mount on hotplug-disks or beneath it, or one on a directory
// between the pod's directory and hotplug-disks, which hides it. pods is
// the kubelet's pods directory as the namespace spells mount points.
func launcherOf(pods, mountPoint string) (string, bool) {
	rel, ok := strings.CutPrefix(mountPoint, pods+"/")
	if !ok {
		return "", false
	}
	uid, _, _ := strings.Cut(rel, "/")
	if isolation.ValidName("pod uid", uid, maxUIDLen) != nil {
		return "", false
	}
	dir := path.Join(pods, strings.TrimPrefix(kubelet.HotplugDisksDir(uid), kubelet.PodsDir+"/"))
	if mountPoint == dir || strings.HasPrefix(mountPoint, dir+"/") || strings.HasPrefix(dir, mountPoint+"/") {
		return uid, true
	}
	return "", false
}
