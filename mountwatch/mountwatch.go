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

// hotplugRel is a launcher's hotplug-disks relative to its pod directory,
// as package kubelet names it.
var hotplugRel = func() string {
	const uid = "uid"
	rel, _ := strings.CutPrefix(kubelet.HotplugDisksDir(uid), path.Join(kubelet.PodsDir, uid)+"/")
	return rel
}()

// launcherOf returns the pod UID whose hotplug-disks the mount point
// concerns: a mount on hotplug-disks or beneath it, or one on a directory
// between the pod's directory and hotplug-disks, which hides it.
// podsSlash is the kubelet's pods directory as the namespace spells mount
// points, and a slash. It allocates only for a mount it keeps: a node's
// every mount is passed through it at start.
func launcherOf[S ~string | ~[]byte](podsSlash string, mountPoint S) (string, bool) {
	if len(mountPoint) <= len(podsSlash) || string(mountPoint[:len(podsSlash)]) != podsSlash {
		return "", false
	}
	rel := mountPoint[len(podsSlash):]
	uid, rest := rel, rel[:0]
	for i := range len(rel) {
		if rel[i] == '/' {
			uid, rest = rel[:i], rel[i+1:]
			break
		}
	}
	n := len(rest)
	switch {
	case n == 0:
	case n == len(hotplugRel) && string(rest) == hotplugRel:
	case n > len(hotplugRel) && rest[len(hotplugRel)] == '/' && string(rest[:len(hotplugRel)]) == hotplugRel:
	case n < len(hotplugRel) && hotplugRel[n] == '/' && hotplugRel[:n] == string(rest):
	default:
		return "", false
	}
	if isolation.ValidName("pod uid", string(uid), maxUIDLen) != nil {
		return "", false
	}
	return string(uid), true
}
