// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"errors"
	"fmt"

	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/mount"
	"github.com/hpmount/hpmount/mountinfo"
)

// inspectDirectory judges a memory-dump or utility volume: the published
// PVC's root bound onto the directory <volume> in hotplug-disks, by the
// engine's own look at the target and observation (engine.View).
func (in *inspector) inspectDirectory(v *Volume, f *findings, vc *volumeCtx, targetDir string) {
	var want *mountinfo.Info // the published volume's mount
	if vc.hv.AttachPod != nil && vc.pvName != "" {
		rel, err := in.findPublished(string(vc.hv.AttachPodUID), vc.pvName)
		switch refusal := kubevirt.RefusalOf(err); {
		case errors.Is(err, kubelet.ErrNotPublished):
			v.AttachmentPod.Publishes = ptr(false)
		case refusal != nil:
			f.refused = refusal
			return
		case err != nil:
			f.err = err
			return
		default:
			v.AttachmentPod.Publishes = ptr(true)
			v.ExpectedSource = in.hostPath(rel)
			want = in.table.Containing(v.ExpectedSource)
		}
	}
	name := kubelet.DirTargetName(v.Volume)
	// The agent refuses a target that is no directory, and to mount over
	// a directory it cannot have made.
	if targetRefused(f, v.Target, in.engine.CheckDir(in.table, targetDir, name)) {
		return
	}
	obs, err := in.observedDir(targetDir, name)
	switch {
	case err != nil:
		f.err = err
		return
	case obs == nil || !obs.Mounted:
		f.notMounted = notMountedWhy(v, vc, whyNotMounted)
		return
	}
	m := in.table.ByID(obs.MountID)
	if m == nil {
		m, _ = in.table.Top(v.Target)
	}
	v.Mount = mountEntry(m, obs.Depth)
	f.stacked = obs.Depth
	switch {
	case obs.SourceGone:
		f.stale = fmt.Sprintf("the mounted directory %s was deleted or its device %s is gone", v.Mount.SourceWithRoot(), obs.Dev)
	case want != nil && m != nil && m.Dev() != want.Dev():
		f.stale = fmt.Sprintf("mounted %s (%s), but the attachment pod publishes %s (%s)", v.Mount.SourceWithRoot(), m.Dev(), want.Source, want.Dev())
	default:
		in.checkSeen(v, f, string(vc.launcher.UID), targetDir, kubelet.DirTargetName(v.Volume))
	}
}

// observedDir is the agent's observation of one directory target.
func (in *inspector) observedDir(targetDir, name string) (*mount.Observed, error) {
	all, err := in.engine.Dirs(in.table, targetDir)
	return named(all, name), lookingAt("list the directory binds in "+in.hostPath(targetDir), err)
}
