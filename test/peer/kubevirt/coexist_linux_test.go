// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package peer

import (
	"testing"

	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/kubevirt"
)

// TestCoexistenceOneHotplug runs both mounters on one node for one VMI's
// hotplug, in both orders: the second finds the first's work and must
// neither stack a second mount nor change what the launcher sees, and
// each volume must end as either mounter alone leaves it (TestDifferential
// lists where those differ).
func TestCoexistenceOneHotplug(t *testing.T) {
	testutil.RequiresRoot(t)
	bin := hpmountSideBin(t)
	vols := []peerVolume{
		{name: "fs-ext4", mode: kubevirt.Filesystem, fstype: "ext4"},
		{name: "blk", mode: kubevirt.Block},
		{name: "dump", mode: kubevirt.Directory, fstype: "ext4"},
	}
	// hpmount's outcome when KubeVirt went first: it takes KubeVirt's
	// binds and node as its own.
	wantHpmount := map[string]string{"fs-ext4": "unchanged", "blk": "unchanged", "dump": "unchanged"}
	for _, order := range []string{"kubevirt-first", "hpmount-first"} {
		t.Run(order, func(t *testing.T) {
			alone := newPeerNode(t, "alone-"+order[:2], vols)
			if order == "kubevirt-first" {
				must(t, alone.mountWithKubeVirt(t))
			} else {
				alone.mountWithHpmount(t, bin)
			}
			n := newPeerNode(t, "co-"+order[:2], vols)
			var outcomes map[string]string
			if order == "kubevirt-first" {
				must(t, n.mountWithKubeVirt(t))
				outcomes = n.mountWithHpmount(t, bin)
			} else {
				n.mountWithHpmount(t, bin)
				if err := n.mountWithKubeVirt(t); err != nil {
					t.Errorf("KubeVirt's Mount after hpmount: %v", err)
				}
			}
			for _, v := range vols {
				if order == "kubevirt-first" && outcomes[v.name] != wantHpmount[v.name] {
					t.Errorf("%s: hpmount after KubeVirt: %s, want %s", v.name, outcomes[v.name], wantHpmount[v.name])
				}
				got, want := n.facts(t, v), alone.facts(t, v)
				if got != want {
					t.Errorf("%s: both mounters left\n %+v\nthe first alone left\n %+v", v.name, got, want)
				}
				if v.mode != kubevirt.Block && got.Mounts != 1 {
					t.Errorf("%s: %d mounts on the target, want 1", v.name, got.Mounts)
				}
			}
			// The VMI is gone: virt-handler's UnmountAll undoes what its
			// record holds, which is only what KubeVirt made itself.
			must(t, n.unmountAllWithKubeVirt(t))
			for _, v := range vols {
				f := n.facts(t, v)
				left := f.Target != "missing" && (v.mode == kubevirt.Block || f.Mounts == 1)
				if want := order == "hpmount-first"; left != want {
					t.Errorf("%s after KubeVirt's UnmountAll: %+v; want it left: %v", v.name, f, want)
				}
				if v.mode == kubevirt.Block && order == "kubevirt-first" && f.CgroupRule != "none" {
					t.Errorf("%s: KubeVirt's UnmountAll left the rule %q", v.name, f.CgroupRule)
				}
			}
		})
	}
}
