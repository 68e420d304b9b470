// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package peer

import (
	"strings"
	"testing"

	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/kubevirt"
)

// TestCoexistenceStaleSnapshot is hpmount's side of the race of both at
// once, made to happen every time: hpmount takes its snapshot and observes
// the launcher (the targets empty), then virt-handler's sync binds the
// volumes, then hpmount attaches on what it saw. Measured: hpmount's
// attach looks at the target again before it binds and leaves
// KubeVirt's bind alone ("unchanged", no changing syscall), so one mount
// per target, seen by the launcher, with the data written before intact;
// virt-handler's records stay good (IsMounted, and UnmountAll at the
// VMI's deletion leaves nothing). The other side of the race, KubeVirt
// binding on top of hpmount's between its own look and its mount, cannot
// be paused from here; TestCoexistenceMatrix's concurrent steps meet it
// and check that hpmount's next pass repairs it.
func TestCoexistenceStaleSnapshot(t *testing.T) {
	testutil.RequiresRoot(t)
	n := newCoNode(t, "ss", []peerVolume{
		{name: "fs", mode: kubevirt.Filesystem, fstype: "ext4"},
		{name: "blk", mode: kubevirt.Block},
		{name: "dump", mode: kubevirt.Directory, fstype: "ext4"},
	})
	markers := n.writeMarkers(t, "stale snapshot")
	before := mountIDs(t)
	var kvErr error
	outcomes := n.hpmountPaused(t, "sync", func() { kvErr = n.kubeVirtSync() })
	must(t, kvErr)
	counts, bad := n.checkSpec(t)
	t.Logf("hpmount on its stale snapshot: %v; mounts per target %s; %d node mounts changed; %s; changing syscalls:\n%s",
		outcomes, counts, mountChurn(before, mountIDs(t)), strings.Join(bad, "; "), strings.Join(n.traced, "\n"))
	if len(bad) > 0 || len(n.traced) > 0 {
		t.Errorf("hpmount acting on a stale look changed the node or left it wrong: %s", strings.Join(bad, "; "))
	}
	n.traced = nil
	n.hpmountSync(t, "sync")
	counts, bad = n.checkSpec(t)
	t.Logf("hpmount's next pass: mounts per target %s; changing syscalls:\n%s", counts, strings.Join(n.traced, "\n"))
	if len(bad) > 0 {
		t.Errorf("after hpmount's next pass: %s", strings.Join(bad, "; "))
	}
	n.readMarkers(t, markers)
	for _, v := range n.vols {
		ok, err := n.kvMounter.IsMounted(n.vmiNow(), v.name, n.attach)
		if !ok || err != nil {
			t.Errorf("KubeVirt's IsMounted(%s) = %v, %v", v.name, ok, err)
		}
	}
	must(t, n.kubeVirtSync())
	must(t, n.kubeVirtCleanup())
	n.gone, n.deleted = append(n.gone, n.launcher), true
	n.hpmountSync(t, "sync")
	if _, bad := n.checkSpec(t); len(bad) > 0 {
		t.Errorf("after the VMI's deletion: %s", strings.Join(bad, "; "))
	}
}
