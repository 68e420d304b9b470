// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package blockdev

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const v1Hierarchy = "/sys/fs/cgroup/devices"

func TestV1AllowDenyRealCgroup(t *testing.T) {
	devs := newTestDevices(t)
	ctrRel := "kubepods/burstable/pod" + testUID + "/" + testCtrID
	base := newCgroupTree(t, v1Hierarchy, ctrRel)
	pod := filepath.Join(base, "kubepods/burstable/pod"+testUID)
	ctr := filepath.Join(base, ctrRel)
	// As runc leaves a container: deny everything, then allow /dev/null.
	for _, w := range []struct{ file, line string }{{"devices.deny", "a"}, {"devices.allow", "c 1:3 rwm"}} {
		if err := os.WriteFile(filepath.Join(ctr, w.file), []byte(w.line), 0); err != nil {
			t.Fatal(err)
		}
	}
	r, err := NewDeviceRules(CgroupV1, base)
	if err != nil {
		t.Fatal(err)
	}

	checkAllowed(t, r, testCtr, devs.loop, false)
	devs.check(t, "before allow", ctr, wantOpen{loop: false, null: true, urandom: false})

	for i := 0; i < 2; i++ {
		if err := r.Allow(testCtr, devs.loop); err != nil {
			t.Fatal(err)
		}
	}
	checkAllowed(t, r, testCtr, devs.loop, true)
	devs.check(t, "after allow", ctr, wantOpen{loop: true, null: true, urandom: false})
	list := readList(t, ctr)
	if n := strings.Count(list, v1Rule(devs.loop)+"\n"); n != 1 {
		t.Fatalf("container devices.list has %d rules %q after allowing twice:\n%s", n, v1Rule(devs.loop), list)
	}

	for i := 0; i < 2; i++ {
		if err := r.Deny(testUID, devs.loop); err != nil {
			t.Fatal(err)
		}
	}
	checkAllowed(t, r, testCtr, devs.loop, false)
	devs.check(t, "after deny", ctr, wantOpen{loop: false, null: true, urandom: false})
	if got := readList(t, ctr); got != "c 1:3 rwm\n" {
		t.Fatalf("container devices.list after deny = %q, want only c 1:3 rwm", got)
	}
	if got := readList(t, pod); got != "a *:* rwm\n" {
		t.Fatalf("pod devices.list after deny = %q: hpmount must not restrict the pod level", got)
	}
}

func TestV1Errors(t *testing.T) {
	base := newCgroupTree(t, v1Hierarchy, "kubepods/burstable")
	r := NewV1(base)
	if err := r.Allow(testCtr, Device{7, 0}); err == nil || !strings.Contains(err.Error(), base) {
		t.Fatalf("allow for a missing pod: %v, want an error naming %q", err, base)
	}
	if err := r.Allow(testCtr, Device{1 << 13, 0}); err == nil {
		t.Fatal("allow of an out-of-range device succeeded")
	}
}

func readList(t *testing.T, dir string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "devices.list"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
