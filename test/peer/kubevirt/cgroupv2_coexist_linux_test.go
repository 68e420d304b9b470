// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package peer

import (
	"strings"
	"testing"

	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/kubevirt"
)

// TestCgroupV2KubeVirtDropsHpmountsRule measures both mounters on one
// cgroup v2 node for a VMI whose second volume KubeVirt cannot mount (a
// claim without disk.img): KubeVirt's Mount sets its device program at the
// first block volume and returns at the failing one, so it never reaches
// the third. hpmount attached that one; KubeVirt's program, built from its
// own list, replaces the one carrying hpmount's rule, and the launcher
// loses the device until hpmount's next pass puts its rule back. Every
// KubeVirt sync does it again. For blk-a, which KubeVirt's list has, the
// launcher never loses the device, yet hpmount finds its own rule gone
// after every KubeVirt sync and reports "created" again (its outcome for a
// node in place whose rule was lost): one program rewrite by each side per
// KubeVirt sync and hpmount pass, bounded by their sync rates.
func TestCgroupV2KubeVirtDropsHpmountsRule(t *testing.T) {
	testutil.RequiresRoot(t)
	if !inCgroupV2Node {
		runInCgroupV2Node(t)
		return
	}
	bin := buildHpmountSide(t)
	vols := []peerVolume{
		{name: "blk-a", mode: kubevirt.Block},
		{name: "nodisk", mode: kubevirt.Filesystem, fstype: "ext4", noDiskImg: true},
		{name: "blk-b", mode: kubevirt.Block},
	}
	n := newPeerNode(t, "v2co", vols)
	access := func() string {
		rule, _ := n.deviceAccess(t, vols[2], "blk-b")
		return rule
	}
	const allowed, refused = "vol:rw mknod:m", "vol:-- mknod:-"
	n.mountWithHpmount(t, bin)
	if got := access(); got != allowed {
		t.Fatalf("after hpmount's attach blk-b is %q, want %q", got, allowed)
	}
	for pass := range 2 {
		err := n.mountWithKubeVirt(t)
		if err == nil || !strings.Contains(err.Error(), "nodisk") {
			t.Fatalf("KubeVirt's Mount %d: %v, want it to stop at nodisk", pass, err)
		}
		if got := access(); got != refused {
			t.Errorf("after KubeVirt's Mount %d blk-b is %q, want %q (its program replaced hpmount's)", pass, got, refused)
		}
		out := n.mountWithHpmount(t, bin)
		if out["blk-a"] != "created" {
			t.Errorf("hpmount's pass %d after KubeVirt's: blk-a %q, want created (its rule rewritten away)", pass, out["blk-a"])
		}
		if got := access(); got != allowed {
			t.Errorf("after hpmount's pass %d (%s) blk-b is %q, want %q", pass, out["blk-b"], got, allowed)
		}
	}
}
