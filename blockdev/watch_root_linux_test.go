// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package blockdev

import (
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestRuleWatchSeesARewrite: a watch made after Allow reports no change
// until another writer rewrites the container's rules (on v2 a program
// attached as a runtime or virt-handler would; on v1 a deny written
// beside hpmount's rule), then reports it once; Allowed then says the
// rule is gone, which is what the watch is for. A container whose cgroup
// goes away makes the watch fail.
func TestRuleWatchSeesARewrite(t *testing.T) {
	for _, tc := range []struct {
		name      string
		hierarchy string
		ctrRel    string
		setUp     func(t *testing.T, ctr string)
		rewrite   func(t *testing.T, ctr string, dev Device)
		rules     func(base string) DeviceRules
	}{
		{
			name: "v2", hierarchy: v2Hierarchy, ctrRel: "kubepods/pod" + testUID + "/" + testCtrID,
			setUp: func(t *testing.T, ctr string) { attachRuntimeProgram(t, ctr, unix.BPF_F_ALLOW_MULTI) },
			rewrite: func(t *testing.T, ctr string, _ Device) {
				attachRuntimeProgram(t, ctr, unix.BPF_F_ALLOW_MULTI)
			},
			rules: func(base string) DeviceRules { return NewV2(base) },
		},
		{
			// No program restricts devices until the runtime attaches one:
			// an empty reading is a reading too.
			name: "v2, no program at first", hierarchy: v2Hierarchy, ctrRel: "kubepods/pod" + testUID + "/" + testCtrID,
			setUp: func(*testing.T, string) {},
			rewrite: func(t *testing.T, ctr string, _ Device) {
				attachRuntimeProgram(t, ctr, unix.BPF_F_ALLOW_MULTI)
			},
			rules: func(base string) DeviceRules { return NewV2(base) },
		},
		{
			name: "v1", hierarchy: v1Hierarchy, ctrRel: "kubepods/burstable/pod" + testUID + "/" + testCtrID,
			setUp: func(t *testing.T, ctr string) {
				for _, w := range []struct{ file, line string }{{"devices.deny", "a"}, {"devices.allow", "c 1:3 rwm"}} {
					if err := os.WriteFile(filepath.Join(ctr, w.file), []byte(w.line), 0); err != nil {
						t.Fatal(err)
					}
				}
			},
			rewrite: func(t *testing.T, ctr string, dev Device) {
				if err := os.WriteFile(filepath.Join(ctr, "devices.deny"), []byte(v1Rule(dev)), 0); err != nil {
					t.Fatal(err)
				}
			},
			rules: func(base string) DeviceRules { return NewV1(base) },
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			devs := newTestDevices(t)
			base := newCgroupTree(t, tc.hierarchy, tc.ctrRel)
			ctr := filepath.Join(base, tc.ctrRel)
			tc.setUp(t, ctr)
			r := tc.rules(base)
			if err := r.Allow(testCtr, devs.loop); err != nil {
				t.Fatal(err)
			}
			w, err := r.Watch(testCtr)
			if err != nil {
				t.Fatal(err)
			}
			changed := func(want bool) {
				t.Helper()
				if got, err := w.Changed(); err != nil || got != want {
					t.Fatalf("changed = %v, %v; want %v", got, err, want)
				}
			}
			changed(false)
			changed(false)
			tc.rewrite(t, ctr, devs.loop)
			changed(true)
			changed(false)
			checkAllowed(t, r, testCtr, devs.loop, false)
			if err := unix.Rmdir(ctr); err != nil {
				t.Fatal(err)
			}
			if _, err := w.Changed(); err == nil {
				t.Fatal("changed after the cgroup went: no error")
			}
			if err := w.Close(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// BenchmarkRuleWatch is one ask of a container's watch, as the engine
// asks every watched launcher's twice a second: its cost times 120 times
// the node's launchers is what the watch costs a minute.
func BenchmarkRuleWatch(b *testing.B) {
	for _, tc := range []struct {
		name, hierarchy, ctrRel string
		rules                   func(base string) DeviceRules
	}{
		{"v2", v2Hierarchy, "kubepods/pod" + testUID + "/" + testCtrID, func(base string) DeviceRules { return NewV2(base) }},
		{"v1", v1Hierarchy, "kubepods/burstable/pod" + testUID + "/" + testCtrID, func(base string) DeviceRules { return NewV1(base) }},
	} {
		b.Run(tc.name, func(b *testing.B) {
			base := newCgroupTree(b, tc.hierarchy, tc.ctrRel)
			w, err := tc.rules(base).Watch(testCtr)
			if err != nil {
				b.Fatal(err)
			}
			defer w.Close()
			b.ReportAllocs()
			for b.Loop() {
				if _, err := w.Changed(); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
