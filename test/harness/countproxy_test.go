// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import "testing"

func TestAPIResource(t *testing.T) {
	for _, tc := range []struct{ path, resource, name string }{
		{"/api/v1/pods", "pods", ""},
		{"/api/v1/namespaces/ns/pods/p1", "pods", "p1"},
		{"/api/v1/namespaces/ns/persistentvolumeclaims", "persistentvolumeclaims", ""},
		{"/apis/kubevirt.io/v1/virtualmachineinstances", "virtualmachineinstances", ""},
		{"/apis/kubevirt.io/v1/namespaces/ns/virtualmachineinstances/vm", "virtualmachineinstances", "vm"},
		{"/api/v1/namespaces", "namespaces", ""},
		{"/api/v1/namespaces/ns", "namespaces", "ns"},
		{"/readyz", "/readyz", ""},
	} {
		if r, n := apiResource(tc.path); r != tc.resource || n != tc.name {
			t.Errorf("apiResource(%q) = %q, %q; want %q, %q", tc.path, r, n, tc.resource, tc.name)
		}
	}
}
