// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import (
	"errors"
	"os"
	"testing"

	"golang.org/x/sys/unix"
)

// TestCreateDiskImage creates a missing disk.img by KubeVirt's rule and
// never touches one that exists.
func TestCreateDiskImage(t *testing.T) {
	n := newNode(t, "ext4")
	img := n.path(hpVolDir, "disk.img")
	must(t, os.Remove(img))
	if _, err := n.a.CheckImage(nil, hpVolDir); !errors.Is(err, ErrNoDiskImage) {
		t.Fatalf("check without disk.img: %v, want ErrNoDiskImage", err)
	}
	if _, created, err := n.a.CreateDiskImage(hpVolDir, 0, 0.055); err == nil || created {
		t.Fatalf("create with unknown capacity: created %v, %v; want an error", created, err)
	}
	if _, err := os.Lstat(img); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused create left %q: %v", img, err)
	}
	var sfs unix.Statfs_t
	must(t, unix.Statfs(n.path(hpVolDir), &sfs))
	want, err := DiskImageSize(1<<30, 0.055, int64(sfs.Bavail)*sfs.Bsize, 0)
	must(t, err)
	size, created, err := n.a.CreateDiskImage(hpVolDir, 1<<30, 0.055)
	if err != nil || !created || size != want {
		t.Fatalf("create: %d %v %v, want %d created", size, created, err, want)
	}
	var st unix.Stat_t
	must(t, unix.Lstat(img, &st))
	switch {
	case st.Mode&unix.S_IFMT != unix.S_IFREG || st.Mode&0o777 != 0o660:
		t.Fatalf("mode %o, want a regular file 0660", st.Mode)
	case st.Uid != DefaultQEMUID || st.Gid != DefaultQEMUID:
		t.Fatalf("owner %d:%d, want 107:107", st.Uid, st.Gid)
	case st.Size != want || want%(1<<20) != 0 || want > (1<<30)*945/1000:
		t.Fatalf("size %d, want %d (1 MiB aligned, within the claim less overhead)", st.Size, want)
	case st.Blocks != 0:
		t.Fatalf("%d blocks allocated, want a sparse file", st.Blocks)
	}
	if _, err := n.a.CheckImage(nil, hpVolDir); err != nil {
		t.Fatalf("the created image fails the attach checks: %v", err)
	}

	// An existing image, even a smaller one, is never touched.
	must(t, os.Truncate(img, 4096))
	must(t, os.Chown(img, 0, 0))
	if _, created, err := n.a.CreateDiskImage(hpVolDir, 1<<30, 0.055); err != nil || created {
		t.Fatalf("create over an existing image: created %v, %v", created, err)
	}
	must(t, unix.Lstat(img, &st))
	if st.Size != 4096 || st.Uid != 0 {
		t.Fatalf("existing image changed: size %d owner %d", st.Size, st.Uid)
	}

	// A symlink named disk.img is not followed.
	must(t, os.Remove(img))
	outside := n.base + "/outside"
	must(t, os.Symlink(outside, img))
	if _, created, err := n.a.CreateDiskImage(hpVolDir, 1<<30, 0.055); err != nil || created {
		t.Fatalf("create over a symlink: created %v, %v", created, err)
	}
	if _, err := os.Lstat(outside); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("create followed the symlink to %q: %v", outside, err)
	}
}
