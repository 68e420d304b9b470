// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package kubelet

import (
	"errors"
	"strings"
	"testing"

	"github.com/hpmount/hpmount/isolation"
)

func TestValidName(t *testing.T) {
	for _, tc := range []struct {
		name string
		ok   bool
	}{
		{"disk1", true},
		{"a.b-c_d", true},
		{strings.Repeat("x", MaxVolumeNameLen), true},
		{strings.Repeat("x", MaxVolumeNameLen+1), false},
		{"", false},
		{".", false},
		{"..", false},
		{"a/b", false},
		{"../x", false},
		{"a\x00b", false},
		{"\x00", false},
		{"a\nb", false},
		{"disk\n", false},
		{"a\rb", false},
		{"a\x1bb", false},
		{"a\x7fb", false},
		{"a\tb", false},
		{strings.Repeat("x", 300), false},
		{"...", true},
		{".img", true},
		{"dísk", true},
	} {
		err := ValidName(tc.name)
		if tc.ok != (err == nil) {
			t.Errorf("ValidName(%.20q) = %v, want ok=%v", tc.name, err, tc.ok)
		}
		if err != nil && !errors.Is(err, isolation.ErrUnsafePath) {
			t.Errorf("ValidName(%.20q) = %v, want it to wrap ErrUnsafePath", tc.name, err)
		}
	}
}

func TestPaths(t *testing.T) {
	for _, tc := range []struct{ got, want string }{
		{HotplugDisksDir("L"), "pods/L/volumes/kubernetes.io~empty-dir/hotplug-disks"},
		{VolumesDir("P"), "pods/P/volumes"},
		{VolumeDevicesDir("P"), "pods/P/volumeDevices"},
		{CSIPublishFile("pv", "P"), "plugins/kubernetes.io/csi/volumeDevices/publish/pv/P"},
		{TargetName("disk"), "disk.img"},
		{Root{Path: "/data/kubelet"}.Abs("pods"), "/data/kubelet/pods"},
	} {
		if tc.got != tc.want {
			t.Errorf("got %q, want %q", tc.got, tc.want)
		}
	}
}

// TestIsTargetName: every entry hpmount makes for a valid volume is one
// the listing of hotplug-disks recognises, ".img" (a directory or block
// volume named ".img") included; unsafe names never are.
func TestIsTargetName(t *testing.T) {
	for _, tc := range []struct {
		name string
		want bool
	}{
		{"disk1", true},
		{"disk1.img", true},
		{".img", true},
		{".img.img", true},
		{strings.Repeat("x", MaxVolumeNameLen) + ".img", true},
		{strings.Repeat("x", MaxVolumeNameLen+1) + ".img", false},
		{"..", false},
		{"..img", true},
		{"a\nb.img", false},
	} {
		if got := IsTargetName(tc.name); got != tc.want {
			t.Errorf("IsTargetName(%.30q) = %t, want %t", tc.name, got, tc.want)
		}
	}
}

// TestHotplugTargetOf: a target path is read under any kubelet root, as
// virt-handler spells it in its own view of the pods directory; anything
// else, or an unsafe component, is not a target.
func TestHotplugTargetOf(t *testing.T) {
	const dir = "volumes/kubernetes.io~empty-dir/hotplug-disks"
	for _, tc := range []struct {
		path      string
		uid, name string
	}{
		{"/var/lib/kubelet/pods/u1/" + dir + "/disk1.img", "u1", "disk1.img"},
		{"/pods/u1/" + dir + "/blk", "u1", "blk"},
		{"//var/lib/kubelet//pods/u1/" + dir + "/./dump", "u1", "dump"},
		{"/var/lib/kubelet/pods/u1/" + dir, "", ""},
		{"/var/lib/kubelet/pods/u1/volumes/kubernetes.io~empty-dir/other/disk1.img", "", ""},
		{"/var/lib/kubelet/pods/u1/volumes/kubernetes.io~csi/hotplug-disks/disk1.img", "", ""},
		{"/var/lib/kubelet/pods/../" + dir + "/disk1.img", "", ""},
		{"/var/lib/kubelet/pods/u1/" + dir + "/a\nb", "", ""},
		{"pods/u1/" + dir + "/disk1.img", "u1", "disk1.img"},
		{"u1/" + dir + "/disk1.img", "", ""},
		{"", "", ""},
	} {
		uid, name, ok := HotplugTargetOf(tc.path)
		if uid != tc.uid || name != tc.name || ok != (tc.uid != "") {
			t.Errorf("HotplugTargetOf(%q) = %q, %q, %v; want %q, %q", tc.path, uid, name, ok, tc.uid, tc.name)
		}
	}
}
