// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import (
	"fmt"
	"os"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/mountinfo"
)

func (a *Attacher) openBound(t *mountinfo.Table, targetDir string, names []string) (map[string]*os.File, error) {
	return inHost(a, func(steps) (map[string]*os.File, error) {
		dir, dirID, err := a.existingTargetDir(t, targetDir)
		if err != nil || dir == nil {
			return nil, err
		}
		defer dir.Close()
		out := make(map[string]*os.File, len(names))
		for _, name := range names {
			if ValidTarget(name) != nil {
				continue
			}
			f, err := openTarget(dir, name)
			if err != nil {
				continue // gone meanwhile; the observe says what is there
			}
			if id, err := isolation.MountID(f); err != nil || id == dirID {
				f.Close()
				continue
			}
			out[name] = f
		}
		return out, nil
	})
}

func answers(f *os.File) error {
	var stx unix.Statx_t
	err := unix.Statx(int(f.Fd()), "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_FORCE_SYNC, unix.STATX_INO, &stx)
	if err != nil {
		return fmt.Errorf("statx %q: %w", f.Name(), err)
	}
	return nil
}
