// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import (
	"errors"
	"fmt"
	"io/fs"
	"os"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/mountinfo"
)

func (a *Attacher) observe(t *mountinfo.Table, targetDir string, list Lister) ([]Observed, error) {
	return inHost(a, func(steps) ([]Observed, error) { return a.observeHere(t, targetDir, list) })
}

func (a *Attacher) observeHere(t *mountinfo.Table, targetDir string, list Lister) ([]Observed, error) {
	dir, dirID, err := a.existingTargetDir(t, targetDir)
	if err != nil || dir == nil {
		return nil, err
	}
	defer dir.Close()
	entries, err := list(dir)
	if err != nil {
		return nil, err
	}
	var out []Observed
	for _, e := range entries {
		file := e.Name()
		// The agent makes regular files; anything else listed is passed
		// over without a stat.
		if !e.Type().IsRegular() || ValidTarget(file) != nil {
			continue
		}
		o, ok, err := a.observeOne(t, dir, dirID, file)
		if err != nil {
			return nil, err
		}
		if ok {
			o.Name = file
			out = append(out, o)
		}
	}
	return out, nil
}

// observeOne describes dir/file; ok is false when it is gone or is not a
// regular file (those are not targets the agent made).
func (a *Attacher) observeOne(t *mountinfo.Table, dir *os.File, dirID uint64, file string) (o Observed, ok bool, err error) {
	tg, err := inspectTarget(t, dir, dirID, file)
	if errors.Is(err, fs.ErrNotExist) {
		return o, false, nil
	}
	if err != nil || !tg.exists {
		// A symlink or directory named *.img is refused by inspectTarget;
		// Observe reports files, so it is skipped, not an error.
		return o, false, ignoreUnsafe(err)
	}
	if !tg.mounted {
		return o, true, nil
	}
	if tg.dead {
		o.Mounted, o.Depth, o.Stacked, o.SourceGone = true, max(tg.depth, 1), tg.depth > 1, true
		if tg.top != nil {
			o.MountID, o.Root, o.Dev = tg.top.ID, tg.top.Root, tg.top.Dev()
		}
		return o, true, nil
	}
	o.Mounted = true
	o.Depth = tg.depth
	o.Stacked = tg.depth > 1
	o.MountID = int(tg.id)
	o.SourceGone = tg.st.Nlink == 0
	major, minor := unix.Major(tg.st.Dev), unix.Minor(tg.st.Dev)
	if tg.top != nil {
		o.Root = tg.top.Root
		o.SourceGone = o.SourceGone || tg.top.Deleted()
		major, minor = tg.top.Major, tg.top.Minor
	}
	o.Dev = fmt.Sprintf("%d:%d", major, minor)
	if major != 0 && !o.SourceGone {
		o.SourceGone = BlockDeviceGone(a.sysRoot(), major, minor)
	}
	return o, true, nil
}
