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
