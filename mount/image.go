// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import (
	"errors"
	"fmt"
	"math"
)

// ErrNoDiskImage is wrapped by Attach and CheckImage when the published
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

// DiskImageSize is the size KubeVirt gives a disk.img: with usable = free +
// allocated (the free space of the filesystem plus what the image already
// occupies), it is (1 - overhead) * min(capacity, usable), aligned down to
// 1 MiB. A capacity of 0 or less (unknown) gives 0, meaning "leave the image
// alone". The overhead must be in [0, 1). It is the one rule for the size of
// a new image (CreateDiskImage) and of an enlarged one (package grow).
func DiskImageSize(capacity int64, overhead float64, free, allocated int64) (int64, error) {
	if math.IsNaN(overhead) || overhead < 0 || overhead >= 1 {
		return 0, fmt.Errorf("filesystem overhead %v is not in [0, 1)", overhead)
	}
	if capacity <= 0 {
		return 0, nil
	}
	usable := max(free, 0) + max(allocated, 0)
	size := min(capacity, usable)
	size = int64((1 - overhead) * float64(size))
	return size &^ (1<<20 - 1), nil
}
