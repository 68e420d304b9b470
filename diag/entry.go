// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package diag

// entry is what a name in a directory is, not following a symlink
// (statEntry).
type entry struct {
	exists bool
	kind   string // "regular file", "block device", "symlink", ...
	rdev   [2]uint32
	size   int64
	nlink  uint64
	// covered: the entry is on another mount than its directory, so
	// something is mounted on the name and the stat is of that.
	covered bool
}
