// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package isolation

import "errors"

// ErrLookupRaced is wrapped when the kernel kept asking for a lookup to be
// retried (EAGAIN: a rename or mount anywhere on the system raced a lookup
// confined to a root) more often than a lookup is retried. A tenant that
// renames in a loop in its own volume must not hold a lookup forever; the
// caller reports the failure and looks again on its next pass.
var ErrLookupRaced = errors.New("the lookup raced renames or mounts too often")

// CheckOpenat2 says whether the kernel has openat2(2) (Linux 5.6): nil, or
// an error wrapping errors.ErrUnsupported. Without it a lookup beneath a
// root walks one component at a time, each opened with O_NOFOLLOW; it is
// as safe and slower. The agent reports the answer at start.
func CheckOpenat2() error { return checkOpenat2() }
