// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"errors"
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/blockdev"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubelet"
)

// Read-only looks at the kubelet tree, run in the host mount namespace,
// beneath the kubelet root, never following a symlink. Each runs through
// isolation.Call, so that a look abandoned past the namespace's deadline
// writes nothing the caller reads.

func (in *inspector) statEntry(dirRel, name string) (entry, error) {
	e, err := isolation.Call(in.ns, func() (entry, error) {
		root, err := in.root.Open()
		if err != nil {
			return entry{}, err
		}
		defer root.Close()
		dir, err := isolation.OpenBeneath(root, dirRel, isolation.How{Flags: unix.O_PATH | unix.O_DIRECTORY})
		if errors.Is(err, os.ErrNotExist) {
			return entry{}, nil
		}
		if err != nil {
			return entry{}, err
		}
		defer dir.Close()
		var st unix.Stat_t
		err = unix.Fstatat(int(dir.Fd()), name, &st, unix.AT_SYMLINK_NOFOLLOW)
		if errors.Is(err, unix.ENOENT) {
			return entry{}, nil
		}
		if err != nil {
			return entry{}, fmt.Errorf("stat %q in %q: %w", name, dir.Name(), err)
		}
		e := entry{exists: true, kind: isolation.FileKind(st.Mode), size: st.Size, nlink: uint64(st.Nlink),
			rdev: [2]uint32{unix.Major(uint64(st.Rdev)), unix.Minor(uint64(st.Rdev))}}
		e.covered, err = blockdev.Covered(dir, name)
		return e, err
	})
	return e, lookingAt(fmt.Sprintf("stat %q in %q", name, in.root.Abs(dirRel)), err)
}

// launcherDirs lists the pod UIDs under <kubelet-root>/pods that have a
// hotplug-disks emptyDir directory.
func (in *inspector) launcherDirs() ([]string, error) {
	uids, err := isolation.Call(in.ns, func() ([]string, error) {
		dirs, err := kubelet.LauncherDirs(in.root)
		var uids []string
		for _, d := range dirs {
			uids = append(uids, d.UID)
		}
		return uids, err
	})
	return uids, lookingAt("list the launchers' hotplug-disks", err)
}
