// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package peer

import (
	"fmt"
	"os"
	"slices"
	"strings"
	"testing"

	v1 "kubevirt.io/api/core/v1"

	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/kubevirt"
)

// TestVirtHandlerUnplugOrder runs a file and a block volume through
// hotplug and KubeVirt's own unplug order with virt-handler's own
// controller (kvHandler) and hpmount syncing at each point, on a cgroup
// v1 node: the spec entry goes, virt-launcher detaches the disks, then
// virt-handler clears their status targets and marks them unmounted, and
// virt-controller deletes the attachment pods and the status entries.
//
// hpmount keeps each volume until its status names no disk target
// (kubevirt.VMI.Keeps): QEMU never loses a disk the domain holds, and
// virt-handler never fails a sync. The launcher's QEMU holds each disk
// the domain holds, and at every point opens each of them again.
func TestVirtHandlerUnplugOrder(t *testing.T) {
	testutil.RequiresRoot(t)
	virtHandlerUnplugOrder(t, "hu1")
}

// TestVirtHandlerUnplugOrderV2 is TestVirtHandlerUnplugOrder on a cgroup
// v2 node, where virt-handler rebuilds the launcher's device program from
// its own list on every sync.
func TestVirtHandlerUnplugOrderV2(t *testing.T) {
	testutil.RequiresRoot(t)
	if !inCgroupV2Node {
		runInCgroupV2Node(t)
		return
	}
	virtHandlerUnplugOrder(t, "hu2")
}

func virtHandlerUnplugOrder(t *testing.T, prefix string) {
	vols := []peerVolume{
		{name: "ext", mode: kubevirt.Filesystem, fstype: "ext4"},
		{name: "blk", mode: kubevirt.Block},
	}
	n := newCoNode(t, prefix, vols)
	h := newKVHandler(t, n)
	n.handler = h
	h.start(t)
	u := &unplugRun{t: t, n: n, h: h}

	// Hotplug: hpmount first, then virt-handler's syncs mark the volumes
	// mounted, the launcher attaches them, and status gets their targets.
	u.hpmount("hotplug", "")
	for range 3 {
		u.handler("hotplug")
	}
	u.expect("hotplug", []string{"blk", "ext"}, "Ready")

	// Unplug: the spec entries go first.
	for _, v := range vols {
		h.unplug(t, v.name)
	}
	n.vols = nil
	u.hpmount("spec removed", "kept: the domain holds it")
	u.present("spec removed", vols, true)
	// virt-handler's sync: virt-launcher detaches the disks.
	u.handler("domain detach")
	if got := h.launcher.attached(); len(got) != 0 {
		t.Fatalf("after the spec removal virt-launcher still holds %q", got)
	}
	// Its status still names the targets, from the domain as it was when
	// the sync began; hpmount still keeps them.
	u.hpmount("domain detach", "kept: the domain holds it")
	u.present("domain detach", vols, true)
	// The next sync clears the targets.
	u.handler("targets cleared")
	for _, v := range vols {
		if st := h.status(t, v.name); st == nil || st.Target != "" {
			t.Fatalf("after the domain detach %s's status entry is %+v, want one without target", v.name, st)
		}
	}
	u.hpmount("targets cleared", "detach removed")
	u.present("targets cleared", vols, false)
	// virt-handler's Mount walks status and binds again what hpmount
	// removed, then its Unmount removes it (not in the spec), as it does
	// without hpmount; its status then says unmounted.
	u.handler("unmounted")
	for _, v := range vols {
		if st := h.status(t, v.name); st == nil || st.Phase != v1.HotplugVolumeUnMounted {
			t.Fatalf("%s's status entry is %+v, want phase %s", v.name, st, v1.HotplugVolumeUnMounted)
		}
	}
	u.present("unmounted", vols, false)
	// virt-controller deletes the attachment pod, which carried both,
	// and the kubelet unpublishes them; then it drops the entries.
	for _, v := range vols {
		n.unpublishVolume(t, n.attach, v)
	}
	n.attachPods[n.attach].stop()
	for _, v := range vols {
		h.dropStatus(t, v.name)
	}
	for range 2 {
		u.handler("status removed")
		u.hpmount("status removed", "")
	}
	u.present("status removed", vols, false)
	if len(h.launcher.refused) > 0 {
		t.Errorf("QEMU's opens refused: %q", h.launcher.refused)
	}
	t.Logf("KubeVirt %s: virt-launcher synced %d times; hpmount's changing syscalls: %d", kubeVirtVersion, h.launcher.syncs, n.hpSyscalls)
}

// unplugRun is one run of the unplug order: each step's sync of either
// mounter fails the test on an error of either.
type unplugRun struct {
	t *testing.T
	n *coNode
	h *kvHandler
}

// handler is one sync of virt-handler; it must end without error, and
// every disk the domain then holds must open as QEMU opens it.
func (u *unplugRun) handler(step string) {
	u.t.Helper()
	if err := u.h.sync(u.t); err != nil {
		u.t.Fatalf("%s: %v", step, err)
	}
	var st []string
	for _, s := range u.h.get(u.t).Status.VolumeStatus {
		st = append(st, fmt.Sprintf("%s %s target %q", s.Name, s.Phase, s.Target))
	}
	u.t.Logf("%s: virt-handler synced; the domain holds %q; status: %s", step, u.h.launcher.attached(), strings.Join(st, ", "))
	u.qemuOpens(step + ", after virt-handler")
}

// hpmount is one pass of hpmount's agent; each outcome of a volume that
// left the spec must be want (any, if want is "").
func (u *unplugRun) hpmount(step, want string) {
	u.t.Helper()
	out := u.n.hpmountSync(u.t, "sync")
	if len(u.n.hpErrs) > 0 {
		u.t.Fatalf("%s: hpmount's errors: %q", step, u.n.hpErrs)
	}
	for name, o := range out {
		if want != "" && !slices.Contains(u.n.vols, u.n.volume(name)) && o != want {
			u.t.Errorf("%s: hpmount's outcome for %s is %q, want %q", step, name, o, want)
		}
	}
	u.t.Logf("%s: hpmount %v", step, out)
	u.qemuOpens(step + ", after hpmount")
}

// qemuOpens has QEMU open every disk the domain holds again.
func (u *unplugRun) qemuOpens(step string) {
	u.t.Helper()
	l := u.h.launcher
	l.mu.Lock()
	defer l.mu.Unlock()
	l.open(l.domain.Spec.Devices.Disks)
	if len(l.refused) > 0 {
		u.t.Fatalf("%s: QEMU's opens refused: %q", step, l.refused)
	}
}

// expect checks that the domain holds names and that their status
// entries are in phase.
func (u *unplugRun) expect(step string, names []string, phase v1.VolumePhase) {
	u.t.Helper()
	got := u.h.launcher.attached()
	slices.Sort(got)
	if !slices.Equal(got, names) {
		u.t.Fatalf("%s: the domain holds %q, want %q", step, got, names)
	}
	for _, name := range names {
		if st := u.h.status(u.t, name); st == nil || st.Phase != phase || st.Target == "" {
			u.t.Fatalf("%s: %s's status entry is %+v, want phase %s with a target", step, name, st, phase)
		}
	}
}

// present checks whether each volume's target is in the launcher.
func (u *unplugRun) present(step string, vols []peerVolume, want bool) {
	u.t.Helper()
	for _, v := range vols {
		_, err := os.Lstat(seenPath(u.n.launcherPod, v))
		if got := err == nil; got != want {
			u.t.Errorf("%s: %s's target present = %v, want %v (%v)", step, v.name, got, want, err)
		}
	}
}
