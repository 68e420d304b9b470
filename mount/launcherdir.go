// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import (
	"os"

	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/mountinfo"
)

// WithLauncherDir calls fn with a copy of a through which the launcher's
// hotplug-disks directory targetDir is opened and judged once: Observe,
// ObserveDirs, OpenBound and InLauncherDir made through the copy each open
// it again from that descriptor (one openat of ".", with an offset of its
// own) instead of walking from the kubelet root and judging its mount
// again. The agent's listing of one launcher made four such walks. The
// looks then all see the directory that was judged, even if it is
// replaced meanwhile. It opens on the caller's thread, so only an a whose
// NS is nil (on a thread already in the host namespace) holds anything;
// with another a, or a directory that cannot be opened, each call opens
// it, and fails, as it would alone.
func (a *Attacher) WithLauncherDir(t *mountinfo.Table, targetDir string, fn func(*Attacher) error) error {
	return a.withLauncherDir(t, targetDir, fn)
}

// InLauncherDir runs fn in a's namespace (see Attacher.NS) on the
// launcher's hotplug-disks directory targetDir, relative to a.KubeletRoot,
// opened exactly as a's own operations open it: beneath the kubelet root,
// symlinks refused, and only if it is the kubelet's emptyDir as the
// batch's table t shows it (a plain directory on the pods directory's
// mount, or a memory-medium tmpfs of its own; anything else wraps
// isolation.ErrUnsafePath). A directory that does not exist wraps
// fs.ErrNotExist and fn does not run.
//
// This is how block volumes (package blockdev, which works on the
// descriptor and opens no kubelet path) obey the same rule as file and
// directory binds, with mount its one owner. The descriptor is opened,
// handed to fn and closed on the one thread that runs the call, so a call
// abandoned past its deadline never leaves it behind to be reused.
func InLauncherDir[T any](a *Attacher, t *mountinfo.Table, targetDir string, fn func(dir *os.File) (T, error)) (T, error) {
	return InLauncherDirLive(a, t, targetDir, func(_ *isolation.Live, dir *os.File) (T, error) { return fn(dir) })
}

// InLauncherDirLive is InLauncherDir for an fn that changes something in
// the directory: it hands fn the Live of the call (isolation.CallLive),
// which fn checks before each change (Uncover does), so that a call given
// up past its deadline changes nothing more. fn is nil-safe with a nil
// Live, which a's own namespace (NS nil) hands it.
func InLauncherDirLive[T any](a *Attacher, t *mountinfo.Table, targetDir string, fn func(live *isolation.Live, dir *os.File) (T, error)) (T, error) {
	return inHost(a, func(s steps) (T, error) {
		dir, err := a.openLauncherDir(t, targetDir)
		if err != nil {
			var zero T
			return zero, err
		}
		defer dir.Close()
		return fn(s.live, dir)
	})
}

// Uncover unmounts whatever is mounted on name in dir (a launcher's
// hotplug-disks, opened by InLauncherDir), one mount at a time from the
// top and each mount alone, until a lookup of name reaches dir's own
// mount, and says how many it removed. What is below a mount is never
// touched: a host file or device node bound there keeps its owner, mode
// and content. A block node is never a mount target, so whatever is
// mounted on one is not hpmount's, and the engine uncovers the name before
// blockdev makes, verifies or removes the node (blockdev itself refuses to
// work through a mount). Call it inside InLauncherDirLive's fn, with its
// Live: each unmount is made only while the caller still waits.
func Uncover(live *isolation.Live, t *mountinfo.Table, dir *os.File, name string) (int, error) {
	return uncover(steps{live: live}, t, dir, name)
}
