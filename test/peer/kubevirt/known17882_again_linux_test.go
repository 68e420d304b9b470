// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package peer

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/types"
	v1 "kubevirt.io/api/core/v1"

	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/kubevirt"
)

// TestKnown17882MigrationAgain follows kubevirt#17882 one migration
// further with KubeVirt's mounter alone, on the target node, as its
// migration-target controller and VM controller call it:
//
//  1. A migration to this node: MountFromPod from the target attachment
//     pod binds the volume into launcher L1 and records the target in
//     virt-handler's record of the VMI.
//  2. It fails: the cleanup's Unmount keeps every volume still in the
//     spec, so the target stays (kubevirt#17882), and so does the record.
//  3. The kubelet deletes L1's pod: it tears down each emptyDir and
//     removes the pod's directory once all are gone.
//  4. The VMI migrates to this node again, into launcher L2 with a new
//     attachment pod, and succeeds: virt-handler's VM controller syncs
//     it (Mount, then Unmount).
//
// virt-handler's Unmount returns at the first recorded target that is
// gone (as in kubevirt#16532), before it rewrites its record, and keeps
// the record in memory: only the VMI leaving the node (UnmountAll) resets
// it. This is the baseline for hpmount's side, which
// TestVirtHandlerMigrationAgain runs with virt-handler's controllers:
//
//   - Filesystem: L1's leaked bind makes the kubelet's teardown fail
//     (EBUSY), so the launcher's pod cannot finish deleting and the
//     claim's filesystem stays mounted on this node; the second
//     migration's Unmount then finds the recorded target and removes it.
//   - Block: a device node holds no mount, so the kubelet removes L1's
//     directory and the second migration's Unmount fails at every sync.
//     KubeVirt poisons its own record.
//
// The record is the same on cgroup v1 and v2, so this runs on v1 only.
func TestKnown17882MigrationAgain(t *testing.T) {
	testutil.RequiresRoot(t)
	for _, c := range []struct {
		vol peerVolume
		// teardown is whether the kubelet's teardown of L1 succeeds;
		// again whether the second migration's syncs succeed.
		teardown, again bool
	}{
		{peerVolume{name: "fs", mode: kubevirt.Filesystem, fstype: "ext4"}, false, true},
		{peerVolume{name: "blk", mode: kubevirt.Block}, true, false},
	} {
		t.Run(c.vol.name, func(t *testing.T) {
			n := newCoNode(t, "ag"+c.vol.name[:1], []peerVolume{c.vol})
			first := n.launcher
			must(t, n.kvMounter.MountFromPod(migrationTarget(n.peerNode, false), n.attach, n.kvCgroup))
			must(t, n.kvMounter.Unmount(migrationTarget(n.peerNode, true), n.kvCgroup))
			if !strings.Contains(n.kvRecord(t), string(first)) {
				t.Fatalf("virt-handler's record after the failed migration: %s, want L1's target", n.kvRecord(t))
			}
			n.launcherPod.stop()
			err := deletePodDir(first)
			t.Logf("the kubelet's teardown of L1: %v", err)
			if (err == nil) != c.teardown {
				t.Errorf("the kubelet's teardown of L1: %v, want success %v", err, c.teardown)
			}

			second, attach := types.UID(n.prefix+"-second"), types.UID(n.prefix+"-attach2")
			n.addLauncher(t, second)
			n.addAttachPod(t, attach)
			target := n.migrationAgain(second, attach, false)
			mgr, err := newCgroupManager(target)
			must(t, err)
			must(t, n.kvMounter.MountFromPod(target, attach, mgr))
			syncErr := n.syncAgain(second, attach)
			t.Logf("virt-handler's sync after the second migration: %v; its record: %s", syncErr, n.kvRecord(t))
			if (syncErr == nil) != c.again {
				t.Errorf("virt-handler's sync after the second migration: %v, want success %v", syncErr, c.again)
			}
			if syncErr != nil && (!errors.Is(syncErr, os.ErrNotExist) || !strings.Contains(syncErr.Error(), string(first))) {
				t.Errorf("virt-handler's failure: %v, want L1's recorded target gone", syncErr)
			}
			if again := n.syncAgain(second, attach); (again == nil) != (syncErr == nil) {
				t.Errorf("virt-handler's next sync: %v, after %v", again, syncErr)
			}
			if !c.teardown {
				must(t, deletePodDir(first)) // the kubelet's retry, once virt-handler removed the bind
			}
			// The VMI leaving the node again resets the record
			// (UnmountAll passes over a target that is gone).
			done := n.migrationAgain(second, attach, true)
			must(t, n.kvMounter.UnmountAll(done, mgr))
			if rec := n.kvRecord(t); rec != "" {
				t.Errorf("virt-handler's record after UnmountAll: %s", rec)
			}
		})
	}
}

// migrationAgain is the node's VMI on a second migration to this node:
// the source on another node and launcher second with attachment pod
// attach here; or, done, the VMI running in second.
func (n *coNode) migrationAgain(second, attach types.UID, done bool) *v1.VirtualMachineInstance {
	vmi := n.vmi()
	vmi.Kind, vmi.APIVersion = "VirtualMachineInstance", v1.SchemeGroupVersion.String()
	if done {
		vmi.Status.ActivePods = map[types.UID]string{second: nodeName}
		for i := range vmi.Status.VolumeStatus {
			vmi.Status.VolumeStatus[i].HotplugVolume.AttachPodUID = attach
		}
		return vmi
	}
	vmi.Status.NodeName = "node-src"
	for i := range vmi.Status.VolumeStatus {
		vmi.Status.VolumeStatus[i].HotplugVolume.AttachPodUID = "source-attach"
	}
	migrateTo(vmi, "mig2-"+types.UID(n.prefix), second, attach)
	return vmi
}

// syncAgain is a sync of virt-handler's VM controller once the second
// migration is done: Mount, then Unmount, with a fresh cgroup manager.
func (n *coNode) syncAgain(second, attach types.UID) error {
	vmi := n.migrationAgain(second, attach, true)
	mgr, err := newCgroupManager(vmi)
	if err != nil {
		return err
	}
	if err := n.kvMounter.Mount(vmi, mgr); err != nil {
		return err
	}
	return n.kvMounter.Unmount(vmi, mgr)
}

// deletePodDir is the kubelet's removal of a deleted pod's directory once
// its containers stopped: it tears down each emptyDir and removes the
// pod's directory only once every one is gone. A mount in an emptyDir
// fails its teardown (EBUSY), and the kubelet retries.
func deletePodDir(uid types.UID) error {
	dir := filepath.Join(podsDir, string(uid))
	emptyDirs := filepath.Join(dir, "volumes", "kubernetes.io~empty-dir")
	entries, err := os.ReadDir(emptyDirs)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var errs []error
	for _, e := range entries {
		errs = append(errs, os.RemoveAll(filepath.Join(emptyDirs, e.Name())))
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	return os.RemoveAll(dir)
}
