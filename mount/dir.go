// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import (
	"github.com/hpmount/hpmount/mountinfo"
	"github.com/hpmount/hpmount/outcome"
)

// Directory volumes: a memory-dump or utility volume is handed to the
// launcher as a directory, not as a disk image. The mount root of the PVC
// that the kubelet published for the attachment pod is bind-mounted onto
// a directory in the launcher's hotplug-disks, as KubeVirt's
// virt-handler does; QEMU (or a backup tool) writes files into it.
//
// The same rules as for file binds hold: the source is opened beneath the
// kubelet root with symlinks refused and used through its fd; the target
// directory is made with mkdirat, which fails on anything already there,
// and never followed through a symlink; a target is never stacked (the
// right source is success, a wrong or dead one is replaced); and the bind
// is never recursive, so mounts below the PVC's root do not follow it into
// the launcher. Removal unmounts and then removes the directory only when
// it is empty.

// AttachDir bind-mounts the directory sourceDir (the volume directory
// kubelet.FindPublished returned) onto targetDir/file (the launcher's
// hotplug-disks, and the target's name there: kubelet.DirTargetName),
// both relative to KubeletRoot, and gives the mounted
// directory to UID:GID so that QEMU can write into it.
//
// A missing target is created exclusively (0750). An existing target must
// be a directory: mounted, or, when not mounted, empty and owned by root
// (what an agent killed between mkdir and mount leaves); anything else is
// refused with isolation.ErrUnsafePath and left alone. A target already
// carrying exactly one mount of the source is left alone (Unchanged);
// another, dead or stacked mount is unmounted first (Replaced).
func (a *Attacher) AttachDir(t *mountinfo.Table, sourceDir, targetDir, file string) (outcome.Result, error) {
	return a.attachDir(t, sourceDir, targetDir, file)
}

// DetachDir unmounts everything on targetDir/file (lazily when busy) and
// then removes the directory if it is empty; a directory with content is
// left in place (nothing of it is the agent's). A missing target is
// Unchanged; a target that is not a directory is refused.
func (a *Attacher) DetachDir(t *mountinfo.Table, targetDir, file string) (outcome.Result, error) {
	return a.detachDir(t, targetDir, file)
}

// ObserveDirs lists the directory targets among the entries list returns
// for targetDir that are the agent's: every directory with a mount on it,
// and every empty, root-owned, unmounted one. A directory with content and no mount is the
// launcher's own and passed over. Name is the directory's name; Root is
// the path inside the mounted filesystem ("/" for a PVC's mount root).
func (a *Attacher) ObserveDirs(t *mountinfo.Table, targetDir string, list Lister) ([]Observed, error) {
	return a.observeDirs(t, targetDir, list)
}
