// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import (
	"errors"

	"github.com/hpmount/hpmount/outcome"
)

// ErrLandedOnAnother means a bind the agent just made landed on another
// mount instead of on the target itself: someone else (virt-handler's own
// mounter) mounted the target between the agent's last look and its
// move_mount. The agent's bind was undone at once, since one stacked on a
// bind that shares the publish mount's peer group propagates onto disk.img
// inside the publish. Attach then judges the other mount at once; the
// error reaches its caller only when the same call loses the race twice,
// and the next pass judges the other mount.
var ErrLandedOnAnother = errors.New("the bind landed on a mount made on the target meanwhile, and was undone")

// ErrTargetChanged means a mount appeared on the target between the
// agent's last look at it and its bind, which was therefore not made: the
// other mounter's work is judged, and adopted when it is right, at once
// by Attach or, when the race repeats, by the next pass.
var ErrTargetChanged = errors.New("a mount appeared on the target while it was being mounted, and nothing was bound")

// settleTwice runs settle (the look, judgement and bind of one target) and
// runs it once more when another mounter took the target between its look
// and its bind. virt-handler's mounter binds the same volume onto the same
// name, so what it made is then judged at once, as the next pass would,
// and adopted when it is right: a race that ends at the spec is no error
// to report. A race that repeats is left to the next pass. A first run
// that peeled a wrong mount still reports the target replaced.
func settleTwice(settle func() (outcome.Result, error)) (outcome.Result, error) {
	res, err := settle()
	if !errors.Is(err, ErrTargetChanged) && !errors.Is(err, ErrLandedOnAnother) {
		return res, err
	}
	again, err := settle()
	if err == nil && again == outcome.Unchanged && res == outcome.Replaced {
		return res, nil
	}
	return again, err
}
