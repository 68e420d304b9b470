// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package kubelet

import (
	"errors"
	"os"
	"path"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/isolation"
)

// unsafeByRule is the rule of ValidName written out independently: what a
// name must not be to become one plain entry in hotplug-disks.
func unsafeByRule(name string, max int) bool {
	return name == "" || name == "." || name == ".." || len(name) > max ||
		strings.ContainsAny(name, "/\x00") || strings.IndexFunc(name, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0
}

// FuzzValidName holds ValidName to the filesystem: a name it accepts
// becomes exactly one new entry of that name (file <name>.img and directory
// <name>) created with O_EXCL and no symlink followed, in a directory of
// this machine, and the orphan sweep's IsTargetName recognises both; a name
// it refuses is one the rule forbids (empty, ".", "..", "/", NUL, a control
// character, too long) and the refusal wraps isolation.ErrUnsafePath.
func FuzzValidName(f *testing.F) {
	for _, s := range []string{"disk1", "hotplug-disk-0", "a.b-c_d", ".", "..", "../../etc", "a/b", "a\x00b", "a\nb",
		"x.img", ".img", "...", strings.Repeat("x", 300), strings.Repeat("y", MaxVolumeNameLen), "dísk", "\xff\xfe"} {
		f.Add(s)
	}
	dir, err := unix.Open(f.TempDir(), unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { unix.Close(dir) })
	f.Fuzz(func(t *testing.T, name string) {
		err := ValidName(name)
		if forbidden := unsafeByRule(name, MaxVolumeNameLen); forbidden != (err != nil) {
			t.Fatalf("ValidName(%q) = %v; the rule forbids it: %t", name, err, forbidden)
		}
		if err != nil {
			if !errors.Is(err, isolation.ErrUnsafePath) {
				t.Fatalf("ValidName(%q) = %v, not wrapping ErrUnsafePath", name, err)
			}
			return
		}
		for _, target := range []string{TargetName(name), DirTargetName(name)} {
			if !IsTargetName(target) {
				t.Fatalf("IsTargetName(%q) is false for a target made for volume %q", target, name)
			}
		}
		createsOneEntry(t, dir, TargetName(name), false)
		createsOneEntry(t, dir, DirTargetName(name), true)
	})
}

// createsOneEntry creates name in dir (a file, or a directory), checks that
// the directory then lists exactly that one name, and removes it.
func createsOneEntry(t *testing.T, dir int, name string, isDir bool) {
	t.Helper()
	if isDir {
		if err := unix.Mkdirat(dir, name, 0o700); err != nil {
			t.Fatalf("mkdirat %q: %v", name, err)
		}
	} else {
		fd, err := unix.Openat(dir, name, unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
		if err != nil {
			t.Fatalf("create %q: %v", name, err)
		}
		unix.Close(fd)
	}
	flags := 0
	if isDir {
		flags = unix.AT_REMOVEDIR
	}
	defer func() {
		if err := unix.Unlinkat(dir, name, flags); err != nil {
			t.Fatalf("remove %q: %v", name, err)
		}
	}()
	d, err := os.Open("/proc/self/fd/" + itoa(dir))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	names, err := d.Readdirnames(-1)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names, []string{name}) {
		t.Fatalf("after creating %q the directory lists %q", name, names)
	}
}

func itoa(n int) string {
	var b []byte
	for ; n >= 10; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(append([]byte{byte('0' + n)}, b...))
}

// FuzzPodVolumePaths: a pod UID and a PV name that validPodVolume accepts
// stay single components of every kubelet path built from them, so no
// spelling of either reaches outside the pod's or the PV's directory.
func FuzzPodVolumePaths(f *testing.F) {
	f.Add("9f8e7d6c-1a2b-4c3d-8e9f-0a1b2c3d4e5f", "pvc-1a2b")
	f.Add("..", "pvc")
	f.Add("uid", "../../../etc")
	f.Add("a\nb", "pv\x00")
	f.Fuzz(func(t *testing.T, uid, pv string) {
		err := validPodVolume(uid, pv)
		forbidden := unsafeByRule(uid, maxComponentLen) || unsafeByRule(pv, maxComponentLen)
		if forbidden != (err != nil) {
			t.Fatalf("validPodVolume(%q, %q) = %v; the rule forbids it: %t", uid, pv, err, forbidden)
		}
		if err != nil {
			return
		}
		for _, tc := range []struct {
			p    string
			want []string
		}{
			{HotplugDisksDir(uid), []string{PodsDir, uid, "volumes", "kubernetes.io~empty-dir", HotplugDisksVolume}},
			{VolumesDir(uid), []string{PodsDir, uid, "volumes"}},
			{VolumeDevicesDir(uid), []string{PodsDir, uid, "volumeDevices"}},
			{CSIPublishFile(pv, uid), []string{"plugins", "kubernetes.io", "csi", "volumeDevices", "publish", pv, uid}},
		} {
			if got := strings.Split(path.Clean(tc.p), "/"); !slices.Equal(got, tc.want) {
				t.Fatalf("path %q has components %q, want %q", tc.p, got, tc.want)
			}
		}
	})
}
