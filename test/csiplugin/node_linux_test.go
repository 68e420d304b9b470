// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package csiplugin

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/container-storage-interface/spec/lib/go/csi"
	"github.com/hpmount/hpmount/internal/testutil"
	"golang.org/x/sys/unix"
	"google.golang.org/grpc/codes"
)

// vol is one volume a test drives through the plugin at the paths the
// kubelet would use, made as the kubelet makes them: the staging
// directory, and the parent of the publish path.
type vol struct {
	k               *kubelet
	id, backing     string
	staging, target string
	vc              *csi.VolumeCapability
	attrs           map[string]string
}

func newVol(t *testing.T, k *kubelet, access, fsType string, size int64) *vol {
	t.Helper()
	root := t.TempDir()
	v := &vol{k: k, id: "pv-" + access + fsType, backing: backingFile(t, size), vc: capability(access, fsType)}
	v.attrs = map[string]string{AttrBackingFile: v.backing, AttrFSType: fsType}
	csiDir := filepath.Join(root, "plugins", "kubernetes.io", "csi")
	if access == AccessBlock {
		v.staging = filepath.Join(csiDir, "volumeDevices", "staging", v.id)
		v.target = filepath.Join(csiDir, "volumeDevices", "publish", v.id, "pod-1")
	} else {
		v.staging = filepath.Join(csiDir, DriverName, "0123abcd", "globalmount")
		v.target = filepath.Join(root, "pods", "pod-1", "volumes", "kubernetes.io~csi", v.id, "mount")
	}
	for _, d := range []string{v.staging, filepath.Dir(v.target)} {
		if err := os.MkdirAll(d, 0o750); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		_ = unmountAll(v.target)
		_ = unmountAll(v.staging)
		_ = detachLoops(v.backing)
	})
	return v
}

func (v *vol) stage(t *testing.T, staging string) error {
	_, err := v.k.NodeStageVolume(callCtx(t), &csi.NodeStageVolumeRequest{
		VolumeId: v.id, StagingTargetPath: staging, VolumeCapability: v.vc, VolumeContext: v.attrs,
	})
	return err
}

func (v *vol) publish(t *testing.T) error {
	_, err := v.k.NodePublishVolume(callCtx(t), &csi.NodePublishVolumeRequest{
		VolumeId: v.id, StagingTargetPath: v.staging, TargetPath: v.target, VolumeCapability: v.vc, VolumeContext: v.attrs,
	})
	return err
}

func (v *vol) unpublish(t *testing.T) error {
	_, err := v.k.NodeUnpublishVolume(callCtx(t), &csi.NodeUnpublishVolumeRequest{VolumeId: v.id, TargetPath: v.target})
	return err
}

func (v *vol) unstage(t *testing.T) error {
	_, err := v.k.NodeUnstageVolume(callCtx(t), &csi.NodeUnstageVolumeRequest{VolumeId: v.id, StagingTargetPath: v.staging})
	return err
}

// twice makes a call twice: the spec wants every node call idempotent.
func twice(t *testing.T, what string, call func(*testing.T) error) {
	t.Helper()
	for i := 1; i <= 2; i++ {
		if err := call(t); err != nil {
			t.Fatalf("%s (call %d): %v", what, i, err)
		}
	}
}

// loopOf returns the one loop device over backing.
func loopOf(t *testing.T, backing string) string {
	t.Helper()
	devs, err := loopsOf(backing)
	if err != nil || len(devs) != 1 {
		t.Fatalf("loop devices over %q: %v, %v; want one", backing, devs, err)
	}
	return devs[0]
}

// waitDetached waits for the kernel to let go of backing: an autoclear
// device goes when its filesystem's last mount does.
func waitDetached(t *testing.T, backing string) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		devs, err := loopsOf(backing)
		if err != nil {
			t.Fatal(err)
		}
		if len(devs) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%q is still attached to %v", backing, devs)
		}
	}
}

// TestLifecycle is what the kubelet does to a volume used by one pod:
// stage, publish, unpublish, unstage, each twice, then stage again to find
// the data that was written (the filesystem is made only once).
func TestLifecycle(t *testing.T) {
	testutil.RequiresRoot(t)
	for _, tc := range []struct {
		access, fsType string
		size           int64
	}{
		{AccessFilesystem, "ext4", 64 << 20},
		{AccessFilesystem, "xfs", testutil.MinXFSSize},
		{AccessBlock, "", 16 << 20},
	} {
		t.Run(tc.access+tc.fsType, func(t *testing.T) {
			k := startPlugin(t, "")
			v := newVol(t, k, tc.access, tc.fsType, tc.size)
			twice(t, "stage", func(t *testing.T) error { return v.stage(t, v.staging) })
			wantCode(t, "stage at another path", v.stage(t, v.staging+"-other"), codes.AlreadyExists)
			checkStaged(t, v, tc.fsType)
			twice(t, "publish", v.publish)
			writeThrough(t, v)
			twice(t, "unpublish", v.unpublish)
			if _, err := os.Lstat(v.target); !os.IsNotExist(err) {
				t.Fatalf("target %q after unpublish: %v, want it removed", v.target, err)
			}
			twice(t, "unstage", v.unstage)
			if top, err := topMount(v.staging); err != nil || top != nil {
				t.Fatalf("staging %q after unstage: mount %v, %v", v.staging, top, err)
			}
			waitDetached(t, v.backing)

			twice(t, "stage again", func(t *testing.T) error { return v.stage(t, v.staging) })
			readBack(t, v)
			twice(t, "unstage again", v.unstage)
			waitDetached(t, v.backing)
		})
	}
}

func checkStaged(t *testing.T, v *vol, fsType string) {
	t.Helper()
	dev := loopOf(t, v.backing)
	if fsType == "" {
		return
	}
	top, err := topMount(v.staging)
	if err != nil || top == nil || top.FSType != fsType || top.Source != dev {
		t.Fatalf("staging %q: mount %+v, %v; want %s from %s", v.staging, top, err, fsType, dev)
	}
}

var payload = []byte("written through the publish path\n")

// writeThrough writes payload through the published target: into a file
// of a filesystem volume, at offset 0 of a block volume's device node.
func writeThrough(t *testing.T, v *vol) {
	t.Helper()
	if v.attrs[AttrFSType] != "" {
		if err := os.WriteFile(filepath.Join(v.target, "hello"), payload, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	var st unix.Stat_t
	if err := unix.Stat(v.target, &st); err != nil {
		t.Fatal(err)
	}
	if rdev, _ := deviceNumber(loopOf(t, v.backing)); st.Mode&unix.S_IFMT != unix.S_IFBLK || st.Rdev != rdev {
		t.Fatalf("publish file %q: mode %o rdev %d, want the loop device %d", v.target, st.Mode, st.Rdev, rdev)
	}
	f, err := os.OpenFile(v.target, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(payload); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// readBack finds payload again after the volume was staged anew: in the
// filesystem, or at the start of the backing file.
func readBack(t *testing.T, v *vol) {
	t.Helper()
	file := v.backing
	if v.attrs[AttrFSType] != "" {
		file = filepath.Join(v.staging, "hello")
	}
	got, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.HasPrefix(got, payload) {
		t.Fatalf("%q starts with %q, want %q", file, got[:min(len(got), len(payload))], payload)
	}
}

// TestPublishNeedsStagingMount: a volume whose staging mount went away
// behind the plugin's back is not published as the empty directory left.
func TestPublishNeedsStagingMount(t *testing.T) {
	testutil.RequiresRoot(t)
	k := startPlugin(t, "")
	v := newVol(t, k, AccessFilesystem, "ext4", 32<<20)
	if err := v.stage(t, v.staging); err != nil {
		t.Fatal(err)
	}
	dev := loopOf(t, v.backing)
	// Hold the device, as the kernel would not keep an autoclear device
	// for the staging record otherwise.
	held, err := os.Open(dev)
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if err := unmountAll(v.staging); err != nil {
		t.Fatal(err)
	}
	wantCode(t, "publish without the staging mount", v.publish(t), codes.FailedPrecondition)
	if top, err := topMount(v.target); err != nil || top != nil {
		t.Fatalf("target %q: mount %+v, %v; want nothing mounted", v.target, top, err)
	}
}

// TestPublishReadOnly: a read-only publish (a readOnly claim) refuses
// writes through the target while the staging mount stays writable.
func TestPublishReadOnly(t *testing.T) {
	testutil.RequiresRoot(t)
	k := startPlugin(t, "")
	v := newVol(t, k, AccessFilesystem, "ext4", 32<<20)
	if err := v.stage(t, v.staging); err != nil {
		t.Fatal(err)
	}
	if _, err := k.NodePublishVolume(callCtx(t), &csi.NodePublishVolumeRequest{
		VolumeId: v.id, StagingTargetPath: v.staging, TargetPath: v.target, VolumeCapability: v.vc, Readonly: true,
	}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(v.target, "x"), payload, 0o644); !errors.Is(err, unix.EROFS) {
		t.Fatalf("write through a read-only target: %v, want EROFS", err)
	}
	if err := os.WriteFile(filepath.Join(v.staging, "x"), payload, 0o644); err != nil {
		t.Fatalf("write to the staging mount: %v", err)
	}
}
