// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package hotplug

import (
	"testing"

	"github.com/hpmount/hpmount/kubevirt"
)

// TestKinds holds each kind's entry to what the rest of the code relies on:
// the target names KubeVirt's launcher opens, and which kinds are bound,
// grown, ruled and opened by QEMU.
func TestKinds(t *testing.T) {
	for _, tc := range []struct {
		mode      kubevirt.VolumeMode
		short     string
		target    string // of volume "v"
		bound     bool
		growth    Growth
		rule, qem bool
	}{
		{kubevirt.Filesystem, "fs", "v.img", true, GrowsFilesystem, false, true},
		{kubevirt.Directory, "dir", "v", true, NoGrowth, false, false},
		{kubevirt.Block, "block", "v", false, ReportsSize, true, true},
	} {
		k, ok := KindOf(tc.mode)
		if !ok {
			t.Fatalf("KindOf(%q): no kind", tc.mode)
		}
		if k.Mode != tc.mode || k.Short != tc.short || k.Target("v") != tc.target || k.Bound != tc.bound ||
			k.Growth != tc.growth || k.DeviceRule != tc.rule || k.QEMUOpens != tc.qem {
			t.Errorf("KindOf(%q) = %+v (target %q)", tc.mode, k, k.Target("v"))
		}
	}
	if k, ok := KindOf("Tape"); ok || k.Bound || k.Growth != NoGrowth || k.DeviceRule || k.Target != nil {
		t.Errorf("KindOf(Tape) = %+v, %v; want the zero Kind", k, ok)
	}
	all := Kinds()
	if len(all) != 3 {
		t.Fatalf("Kinds() = %d kinds, want 3", len(all))
	}
	all[0].Short = "changed"
	if k, _ := KindOf(all[0].Mode); k.Short == "changed" {
		t.Error("Kinds() hands out the table itself")
	}
}

func TestGrowthChecked(t *testing.T) {
	for _, tc := range []struct {
		g                Growth
		growFS, expected bool
	}{
		{NoGrowth, true, false},
		{NoGrowth, false, false},
		{GrowsFilesystem, true, true},
		{GrowsFilesystem, false, false},
		{ReportsSize, true, true},
		{ReportsSize, false, true},
	} {
		if got := (Kind{Growth: tc.g}).GrowthChecked(tc.growFS); got != tc.expected {
			t.Errorf("Growth %d, growing filesystems %v: checked = %v, want %v", tc.g, tc.growFS, got, tc.expected)
		}
	}
}

func TestHealthy(t *testing.T) {
	live := ObservedVolume{Mounted: true, Stacked: 1}
	for _, tc := range []struct {
		name string
		mode kubevirt.VolumeMode
		o    *ObservedVolume
		want bool
	}{
		{"nothing observed", kubevirt.Filesystem, nil, false},
		{"file bind", kubevirt.Filesystem, with(live, kubevirt.Filesystem), true},
		{"directory bind", kubevirt.Directory, with(live, kubevirt.Directory), true},
		{"another kind's entry", kubevirt.Filesystem, with(live, kubevirt.Directory), false},
		{"file not mounted", kubevirt.Filesystem, &ObservedVolume{Mode: kubevirt.Filesystem}, false},
		{"stacked bind", kubevirt.Directory, &ObservedVolume{Mode: kubevirt.Directory, Mounted: true, Stacked: 2}, false},
		{"dead bind", kubevirt.Filesystem, &ObservedVolume{Mode: kubevirt.Filesystem, Mounted: true, SourceGone: true}, false},
		{"block node", kubevirt.Block, &ObservedVolume{Mode: kubevirt.Block}, true},
		{"block node covered", kubevirt.Block, with(live, kubevirt.Block), false},
	} {
		if got := tc.o.Healthy(tc.mode); got != tc.want {
			t.Errorf("%s: Healthy(%s) = %v, want %v", tc.name, tc.mode, got, tc.want)
		}
	}
}

func with(o ObservedVolume, mode kubevirt.VolumeMode) *ObservedVolume {
	o.Mode = mode
	return &o
}
