// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package peer

import (
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/kubevirt"
)

// TestSeed004KubeVirtDoesNotGrowHpmountDoes is the reason hpmount exists
// (reference 004, "Filesystem Mode PVC (Corner Case)"), shown against the
// real peer on one node: a filesystem volume is bound into the launcher,
// its attachment pod is replaced by one that no longer publishes it (so no
// NodeExpandVolume runs for it), and the backend grows the device.
// virt-handler's mounter, synced again, leaves the filesystem under
// <vol>.img at its old size; hpmount's Grow grows it online.
func TestSeed004KubeVirtDoesNotGrowHpmountDoes(t *testing.T) {
	testutil.RequiresRoot(t)
	bin := buildHpmountSide(t)
	// xfs: online ext4 growth needs CAP_SYS_RESOURCE, which the machines
	// this runs on may withhold from root (the ext4 case is the same
	// otherwise, and test/csiplugin shows the EPERM).
	v := peerVolume{name: "fs", mode: kubevirt.Filesystem, fstype: "xfs"}
	n := newPeerNode(t, "s4", []peerVolume{v})
	must(t, n.mountWithKubeVirt(t))
	target := filepath.Join(kubeletRoot, kubelet.HotplugDisksDir(string(n.launcher)), "fs.img")
	before := fsBytes(t, target)

	// The attachment pod is replaced: the kubelet unpublishes the volume
	// from the old pod, the new one does not carry it; the launcher's
	// bind alone keeps the filesystem mounted. Then the claim grows.
	must(t, unix.Unmount(n.mountDir(v), unix.MNT_DETACH))
	n.attach = types.UID("s4-attach-new")
	n.loops[v.name].Grow(t, 4*testutil.MinXFSSize)

	must(t, n.mountWithKubeVirt(t))
	if got := fsBytes(t, target); got != before {
		t.Fatalf("KubeVirt's mounter changed the filesystem: %d -> %d bytes", before, got)
	}
	t.Logf("KubeVirt's Mount after the replacement: filesystem still %d bytes on a %d-byte device", before, 4*testutil.MinXFSSize)

	outcomes := n.runHpmount(t, bin, "grow")
	after := fsBytes(t, target)
	if after < 3*before {
		t.Fatalf("hpmount's Grow (%s): filesystem %d -> %d bytes, want it grown to the device's %d", outcomes[v.name], before, after, 4*testutil.MinXFSSize)
	}
	t.Logf("hpmount's Grow: filesystem %d -> %d bytes", before, after)
}

// fsBytes is the size of the filesystem holding path.
func fsBytes(t *testing.T, path string) int64 {
	t.Helper()
	var st unix.Statfs_t
	must(t, unix.Statfs(path, &st))
	return int64(st.Blocks) * st.Bsize
}
