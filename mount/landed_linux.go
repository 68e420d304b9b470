// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import (
	"errors"
	"fmt"
	"os"
	"strconv"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/mountinfo"
)

// onDirMount refuses a target just opened for a bind that is not on the
// directory's own mount: another mounter mounted it since the agent's last
// look (ErrTargetChanged).
func onDirMount(tf *os.File, dirID uint64) error {
	id, err := isolation.MountID(tf)
	if err != nil {
		return fmt.Errorf("mount of target %q: %w", tf.Name(), err)
	}
	if id != dirID {
		return fmt.Errorf("%w (%q is on mount %d, not on the directory's mount %d)", ErrTargetChanged, tf.Name(), id, dirID)
	}
	return nil
}

// undoIfLanded checks where the bind tree was just moved onto dst (the
// target, opened before the move, so its own mount is the directory's):
// its parent must be that mount. A parent of any other id is a mount made
// on the target meanwhile, and the bind is on top of it; it is unmounted
// at once, even by a call its caller gave up on: left there, it has
// already propagated onto disk.img inside the publish mount when the
// other mount shares that mount's peer group, and every later attach of
// the volume is refused. The unmount propagates to that copy too.
//
// Where the kernel cannot say (no statmount(2), before Linux 6.8) nothing
// is checked: the next pass sees the stack and peels what it can.
func undoIfLanded(tree int, dst *os.File) error {
	want, err := isolation.MountID(dst)
	if err != nil {
		return err
	}
	m, err := mountinfo.StatFd(tree)
	if errors.Is(err, mountinfo.ErrNoStatmount) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("where the bind onto %q landed: %w", dst.Name(), err)
	}
	if uint64(m.Parent) == want {
		return nil
	}
	// The tree fd still holds the mount: a lazy unmount, which also
	// removes the copies it propagated.
	if err := unix.Unmount("/proc/self/fd/"+strconv.Itoa(tree), unix.MNT_DETACH); err != nil {
		return fmt.Errorf("bind onto %q landed on mount %d, not on the directory's mount %d, and could not be undone: %w",
			dst.Name(), m.Parent, want, err)
	}
	return fmt.Errorf("bind onto %q: %w (it was on mount %d, not on the directory's mount %d)", dst.Name(), ErrLandedOnAnother, m.Parent, want)
}
