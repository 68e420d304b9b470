// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package propagation

import "testing"

func TestQEMUExecutable(t *testing.T) {
	for _, tc := range []struct {
		exe  string
		want bool
	}{
		{"/usr/libexec/qemu-kvm", true}, // KubeVirt's virt-launcher image
		{"/usr/bin/qemu-system-x86_64", true},
		{"/usr/bin/qemu-system-aarch64", true},
		{"/tmp/qemu-x", false}, // a tenant's look-alike
		{"/usr/bin/qemu-img", false},
		{"/usr/bin/qemu-kvm-helper", false},
		{"/usr/sbin/virtqemud", false},
		{"/usr/bin/qemu-kvm/sleep", false},
		{"", false},
	} {
		if got := qemuExecutable(tc.exe); got != tc.want {
			t.Errorf("qemuExecutable(%q) = %v, want %v", tc.exe, got, tc.want)
		}
	}
}
