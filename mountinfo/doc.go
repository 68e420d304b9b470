// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package mountinfo owns reading the kernel's mount table: the parser of
// /proc/<pid>/mountinfo text (Parse, ParseLenient, on any io.Reader) and
// Table, one scan indexed by mount id, mount point (bottom of a stack
// first), device and containing mount, which a whole batch of decisions is
// made from.
//
// On Linux ≥ 6.8 it also reads mounts without the whole table:
// ReadBeneath asks statmount(2) and listmount(2) (raw syscalls, the struct
// laid out as the kernel's uapi mount.h) for what is mounted on the
// entries of one directory (the engine asks about one launcher's), and returns a
// partial Table of the same entries ReadTable would give for those mounts,
// keyed by the same reused mount ids (the kernel's 64-bit unique ids ride
// along in Info.UniqueID). CheckStatmount says at start whether the kernel
// can; where it cannot (ErrNoStatmount), the caller reads the table. Both
// paths are held to each other entry by entry (TestReadBeneathMatchesTable).
// It is the one owner of that kernel ABI: NamespaceID, ListMountsIn and
// MountPointIn ask the same syscalls about another mount namespace, by its
// id (Linux ≥ 6.11), for package mountwatch.
//
// Lines are decoded exactly as show_mountinfo writes them, octal escapes
// included; a line not in that format is refused, never guessed at, and
// ReadTable skips it and records it (Skipped) so that one odd mount does
// not stop every decision on a node.
//
// It refuses everything else: it mounts nothing, opens no path but the
// table it is asked to read (and, for ReadBeneath, the directory it is
// asked about, never through a symlink), and knows nothing of the
// kubelet, KubeVirt or what hpmount mounts. It imports no package of the project, so that every
// package that only reads mounts (propagation, diag, node) can depend on
// it without depending on the mounting code.
package mountinfo
