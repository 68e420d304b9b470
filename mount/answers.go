// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import (
	"os"

	"github.com/hpmount/hpmount/mountinfo"
)

// OpenBound opens, in the host namespace, what is mounted on each of the
// named targets of targetDir (relative to KubeletRoot; file or directory
// targets alike), as an O_PATH descriptor for Answers. A name that is
// gone, is not a plain file name, or carries no mount has no entry. The
// caller closes every file it gets.
//
// Opening asks the volume's filesystem nothing beyond what a lookup of a
// mount point does, as Observe's look; whatever may hang is left to
// Answers, which the caller runs where a hang holds nothing else.
func (a *Attacher) OpenBound(t *mountinfo.Table, targetDir string, names []string) (map[string]*os.File, error) {
	return a.openBound(t, targetDir, names)
}

// Answers asks the filesystem of f for its attributes afresh
// (AT_STATX_FORCE_SYNC): a network filesystem's server or a FUSE daemon
// has to answer, where Observe's look takes what the kernel cached and so
// keeps answering for storage that stopped long ago. A local filesystem
// answers from memory. It blocks for as long as the server does not
// answer; the error it returns once it does is the filesystem's.
func Answers(f *os.File) error { return answers(f) }
