// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mountwatch

import "testing"

func TestLauncherOf(t *testing.T) {
	const pods = "/var/lib/kubelet/pods"
	const hp = pods + "/u1/volumes/kubernetes.io~empty-dir/hotplug-disks"
	for _, tc := range []struct {
		mountPoint string
		want       string
	}{
		{hp + "/disk0.img", "u1"},
		{hp + "/memdump/inner", "u1"},
		{hp, "u1"}, // the kubelet's tmpfs (medium Memory), or one stacked on it
		{pods + "/u1/volumes/kubernetes.io~empty-dir", "u1"}, // hides hotplug-disks
		{pods + "/u1", "u1"},
		{pods + "/u1/volumes/kubernetes.io~csi/pv/mount", ""}, // an attachment pod's publish
		{pods + "/u1/volumes/kubernetes.io~empty-dir/hotplug-disks-other", ""},
		{pods + "/u1/volumes/kubernetes.io~projected/token", ""},
		{pods, ""},
		{"/var/lib/kubelet/podsX/u1", ""},
		{"/mnt" + hp, ""},
		{pods + "/../etc", ""},
		{pods + "/", ""},
	} {
		got, ok := launcherOf(pods+"/", tc.mountPoint)
		if got != tc.want || ok != (tc.want != "") {
			t.Errorf("launcherOf(%q) = %q, %t; want %q", tc.mountPoint, got, ok, tc.want)
		}
		if got, _ := launcherOf(pods+"/", []byte(tc.mountPoint)); got != tc.want {
			t.Errorf("launcherOf of bytes %q = %q, want %q", tc.mountPoint, got, tc.want)
		}
	}
}
