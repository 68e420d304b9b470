// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package csiplugin

import (
	"strings"
	"testing"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hpmount/hpmount/blockdev"
	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/mount"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
)

// TestExpand grows each kind of published volume as a resize does: the
// backend grows the backing file (GrowBackingFile), then the kubelet calls
// NodeExpandVolume with the publish path.
func TestExpand(t *testing.T) {
	testutil.RequiresRoot(t)
	for _, tc := range []struct {
		access, fsType string
		size, grown    int64
	}{
		{AccessFilesystem, "xfs", testutil.MinXFSSize, testutil.MinXFSSize + 100<<20},
		{AccessFilesystem, "ext4", 64 << 20, 128 << 20},
		{AccessBlock, "", 16 << 20, 32 << 20},
	} {
		t.Run(tc.access+tc.fsType, func(t *testing.T) {
			k := startPlugin(t, "")
			v := newVol(t, k, tc.access, tc.fsType, tc.size)
			if err := v.stage(t, v.staging); err != nil {
				t.Fatal(err)
			}
			if err := v.publish(t); err != nil {
				t.Fatal(err)
			}
			expand := func(required int64) (*csi.NodeExpandVolumeResponse, error) {
				return k.NodeExpandVolume(callCtx(t), &csi.NodeExpandVolumeRequest{
					VolumeId: v.id, VolumePath: v.target, StagingTargetPath: v.staging,
					VolumeCapability: v.vc, CapacityRange: &csi.CapacityRange{RequiredBytes: required},
				})
			}
			_, err := expand(tc.grown)
			wantCode(t, "expand before the backend grew", err, codes.OutOfRange)
			if err := GrowBackingFile(v.backing, tc.grown); err != nil {
				t.Fatal(err)
			}
			resp, err := expand(tc.grown)
			if tc.fsType == "ext4" && err != nil {
				wantOnlineExt4Refused(t, err)
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if resp.GetCapacityBytes() != tc.grown {
				t.Fatalf("capacity %d after expand, want %d", resp.GetCapacityBytes(), tc.grown)
			}
			if tc.fsType != "" {
				wantFilesystemGrown(t, v.target, tc.size)
			}
		})
	}
}

// wantOnlineExt4Refused accepts the one failure this machine has: root
// without CAP_SYS_RESOURCE cannot grow a mounted ext4 (EXT4_IOC_RESIZE_FS
// answers EPERM), and the error must say so.
func wantOnlineExt4Refused(t *testing.T, err error) {
	t.Helper()
	if !strings.Contains(err.Error(), unix.EPERM.Error()) || !strings.Contains(err.Error(), "CAP_SYS_RESOURCE") {
		t.Fatalf("expand ext4: %v; only EPERM (no CAP_SYS_RESOURCE) is expected", err)
	}
	t.Logf("ext4 online growth refused here, as expected without CAP_SYS_RESOURCE: %v", err)
}

// wantFilesystemGrown checks with statfs that the filesystem under path is
// larger than the device it was made on.
func wantFilesystemGrown(t *testing.T, path string, before int64) {
	t.Helper()
	usage, err := mount.FilesystemSize(path)
	if err != nil {
		t.Fatal(err)
	}
	if usage.SizeBytes <= before {
		t.Fatalf("filesystem at %q holds %d bytes after expand, no more than the %d-byte device it was made on", path, usage.SizeBytes, before)
	}
}

// TestGrowAfterUnstage is the resize the kubelet never sees (issue #12,
// scenario 3): the volume was unstaged while another bind of its
// filesystem (hpmount's, in a launcher) kept it mounted. The loop device
// stays until that bind goes, and GrowBackingFile still reaches it.
func TestGrowAfterUnstage(t *testing.T) {
	testutil.RequiresRoot(t)
	k := startPlugin(t, "")
	v := newVol(t, k, AccessFilesystem, "xfs", testutil.MinXFSSize)
	if err := v.stage(t, v.staging); err != nil {
		t.Fatal(err)
	}
	dev := loopOf(t, v.backing)
	elsewhere := t.TempDir()
	if err := unix.Mount(v.staging, elsewhere, "", unix.MS_BIND, ""); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unmountAll(elsewhere) })
	if err := v.unstage(t); err != nil {
		t.Fatal(err)
	}
	if still := loopOf(t, v.backing); still != dev {
		t.Fatalf("after unstage %q is on %s, was on %s", v.backing, still, dev)
	}
	grown := int64(testutil.MinXFSSize + 100<<20)
	if err := GrowBackingFile(v.backing, grown); err != nil {
		t.Fatal(err)
	}
	rdev, err := deviceNumber(dev)
	if err != nil {
		t.Fatal(err)
	}
	if size, err := blockdev.DeviceSize("/sys", unix.Major(rdev), unix.Minor(rdev)); err != nil || size != grown {
		t.Fatalf("%s holds %d bytes (%v) after GrowBackingFile, want %d", dev, size, err, grown)
	}
	if err := unmountAll(elsewhere); err != nil {
		t.Fatal(err)
	}
	waitDetached(t, v.backing)
}
