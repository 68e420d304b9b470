// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import "errors"

// ErrLandedOnAnother means a bind the agent just made landed on another
// mount instead of on the target itself: someone else (virt-handler's own
// mounter) mounted the target between the agent's last look and its
// move_mount. The agent's bind was undone at once, since one stacked on a
// bind that shares the publish mount's peer group propagates onto disk.img
// inside the publish; the next pass finds the other mount and judges it.
var ErrLandedOnAnother = errors.New("the bind landed on a mount made on the target meanwhile, and was undone")

// ErrTargetChanged means a mount appeared on the target between the
// agent's last look at it and its bind, which was therefore not made: the
// other mounter's work is judged, and adopted when it is right, by the
// next pass.
var ErrTargetChanged = errors.New("a mount appeared on the target while it was being mounted, and nothing was bound")
