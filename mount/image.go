// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import "errors"

// ErrNoDiskImage is wrapped by Attach and CheckSource when the published
// volume directory holds no disk.img at all: a filesystem-mode PVC freshly
// provisioned and never imported, for instance. KubeVirt then fails the
// hotplug (kubevirt#14491); CreateDiskImage is the opt-in remedy.
var ErrNoDiskImage = errors.New("the volume holds no disk.img")

// CreateDiskImage creates sourceDir/disk.img (sourceDir relative to
// KubeletRoot, as for Attach) sparse, owned by UID:GID, mode 0660, of
// KubeVirt's size for a new image: DiskImageSize of the claim's capacity
// with the filesystem's available space as usable and nothing allocated.
//
// The file is made with O_CREAT|O_EXCL|O_NOFOLLOW beneath the volume
// directory, which is reached without a symlink: an existing disk.img of
// any kind is never opened, truncated or replaced, and yields created
// false with no error. A capacity of 0 (unknown) or a size below 1 MiB is
// an error and creates nothing. It returns the image's size.
func (a *Attacher) CreateDiskImage(sourceDir string, capacity int64, overhead float64) (size int64, created bool, err error) {
	return a.createDiskImage(sourceDir, capacity, overhead)
}
