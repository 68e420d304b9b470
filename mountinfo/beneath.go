// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mountinfo

import "errors"

// ErrNoStatmount means the kernel cannot answer ReadBeneath: it has no
// statmount(2) or listmount(2) (before Linux 6.8, or filtered by a seccomp
// profile), no STATX_MNT_ID_UNIQUE, or leaves out a field the entries
// need. The caller reads the whole table instead (ReadTable).
var ErrNoStatmount = errors.New("statmount and listmount cannot describe mounts here")

// CheckStatmount says whether ReadBeneath works in the calling thread's
// mount namespace: nil, or an error wrapping ErrNoStatmount. It asks the
// kernel once per call (one statx and one statmount of the root mount),
// so a caller asks it at start and keeps the answer.
func CheckStatmount() error { return checkStatmount() }

// ReadBeneath reads what is mounted on the entries of the directory dir
// (an absolute path without symlinks, in the calling thread's mount
// namespace) without reading the whole mount table, and returns it as a
// Table whose entries are those ReadTable would give for the same mounts:
//
//   - the mount dir is on;
//   - for each entry of dir, every mount stacked on it, bottom first, down
//     to dir's mount: a lookup of the entry names the top one
//     (statx STATX_MNT_ID_UNIQUE), statmount(2) names each one's parent;
//   - for an entry whose filesystem answers nothing (a dead source: EIO,
//     ENOTCONN), the mounts on it found by listmount(2) of dir's mount,
//     filtered by mount point, since the entry cannot be asked;
//   - the mount each path of also is on (e.g. the volume directory a bind
//     is made from).
//
// The table is partial: ByDevice and Containing answer for these mounts
// only, so a rule that needs every mount of a device on the node (another
// mount of the same tmpfs, say) needs ReadTable. It is keyed by the same
// reused ids as a table read from mountinfo (Info.ID, Info.Parent); the
// unique ids are in Info.UniqueID and Info.UniqueParent. A dir that does
// not exist, is not a directory or is reached through a symlink gives a
// table of the paths of also alone. Where the kernel cannot answer, the
// error wraps ErrNoStatmount.
func ReadBeneath(dir string, also ...string) (*Table, error) { return readBeneath(dir, also) }

// Stat returns the mount with the unique id (Info.UniqueID), as ReadTable
// would show it, read with statmount(2) in the calling thread's mount
// namespace.
func Stat(uniqueID uint64) (Info, error) { return statOne(uniqueID) }

// StatFd returns the mount the open file fd is on (the mount itself when
// fd is its root, as a tree of open_tree is), read with statx and
// statmount(2) without asking its filesystem anything. Where the kernel
// cannot, the error wraps ErrNoStatmount.
func StatFd(fd int) (Info, error) { return statFd(fd) }
