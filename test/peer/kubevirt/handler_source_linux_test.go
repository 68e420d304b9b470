// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package peer

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/api"

	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/kubevirt"
)

// TestVirtHandlerMigrationSource runs, on a migration's source node,
// virt-handler's own VM controller beside hpmount through a migration to
// another node that succeeds. virt-handler binds the volumes first, so
// its record names them. While the migration runs, both keep every
// volume. Once it is done, virt-handler deletes the migrated domain and
// cleans up (UnmountAll), and hpmount empties the source launcher once its
// pod stopped, leaving what the record names to virt-handler:
//
//   - the pod stops after virt-handler's cleanup, which removes the
//     targets and the record; hpmount then finds nothing left;
//   - the pod stops first and virt-handler cleans up next: it removes
//     the targets, but finds no launcher for a cgroup manager, so it
//     warns once per block volume that it cannot deny its device (the
//     launcher's cgroup is gone anyway): KubeVirt's own warning;
//   - the pod stops first and hpmount goes next: it leaves the recorded
//     targets to virt-handler, whose cleanup then removes them with the
//     same warning and no other.
//
// In each, nothing is left in the launcher, and the kubelet can remove
// its pod.
func TestVirtHandlerMigrationSource(t *testing.T) {
	testutil.RequiresRoot(t)
	virtHandlerMigrationSource(t, "ms1")
}

// TestVirtHandlerMigrationSourceV2 is TestVirtHandlerMigrationSource on a
// cgroup v2 node.
func TestVirtHandlerMigrationSourceV2(t *testing.T) {
	testutil.RequiresRoot(t)
	if !inCgroupV2Node {
		runInCgroupV2Node(t)
		return
	}
	virtHandlerMigrationSource(t, "ms2")
}

// noCgroupManager is virt-handler's warning when its cleanup cannot deny
// a block volume's device because the launcher is gone.
const noCgroupManager = "cgroup manager is nil"

func virtHandlerMigrationSource(t *testing.T, prefix string) {
	for i, c := range []struct {
		name                   string
		podFirst, hpmountFirst bool
	}{
		{"pod stops last", false, false},
		{"pod stops first, virt-handler next", true, false},
		{"pod stops first, hpmount next", true, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			vols := []peerVolume{{name: "ext", mode: kubevirt.Filesystem, fstype: "ext4"}, {name: "blk", mode: kubevirt.Block}}
			n := newCoNode(t, fmt.Sprintf("%s%d", prefix, i), vols)
			h := newKVHandler(t, n)
			n.handler = h
			h.start(t)
			u := &unplugRun{t: t, n: n, h: h}
			for range 3 {
				u.handler("hotplug")
			}
			u.hpmount("hotplug", "")
			u.expect("hotplug", []string{"blk", "ext"}, "Ready")
			if n.kvRecord(t) == "" {
				t.Fatal("virt-handler bound first but recorded nothing")
			}

			h.update(t, migrateAway)
			h.launcher.domain.Spec.Metadata.KubeVirt.Migration = &api.MigrationMetadata{StartTimestamp: now()}
			u.handler("migrating")
			u.hpmount("migrating", "")
			u.present("migrating", vols, true)

			h.update(t, migratedAway)
			h.launcher.domain.Spec.Metadata.KubeVirt.Migration.EndTimestamp = now()
			h.launcher.domain.Status.Status, h.launcher.domain.Status.Reason = api.Shutoff, api.ReasonMigrated
			h.feedBack(t) // the source launcher's domain event
			l := n.launcher
			if c.podFirst {
				n.launchers[l].stop()
			}
			if c.hpmountFirst {
				n.launcher, n.gone = "", []types.UID{l}
				u.hpmount("source stopped", "detach left-to-virt-handler")
				targetsLeft(t, "source stopped, hpmount", l, vols, true)
			}
			err := h.sync(t)
			t.Logf("migration done: virt-handler's sync: %v", err)
			if warned := cleanupWarnings(t, err); warned != c.podFirst {
				t.Errorf("virt-handler warned it could not deny a device: %v, want %v", warned, c.podFirst)
			}
			if rec := n.kvRecord(t); rec != "" {
				t.Errorf("after virt-handler's cleanup its record is %s", rec)
			}
			if !c.podFirst {
				n.launchers[l].stop()
			}
			n.launcher, n.gone = "", []types.UID{l}
			u.hpmount("both done", "")
			targetsLeft(t, "both done", l, vols, false)
			if err := deletePodDir(l); err != nil {
				t.Errorf("the kubelet's removal of the source launcher's pod: %v", err)
			}
		})
	}
}

// cleanupWarnings reports whether virt-handler's sync complained that it
// could not deny a device for want of a cgroup manager, and fails the
// test on any other complaint.
func cleanupWarnings(t *testing.T, err error) bool {
	t.Helper()
	if err == nil {
		return false
	}
	warned := false
	for _, line := range strings.Split(strings.TrimPrefix(err.Error(), "virt-handler's sync: "), "; ") {
		if !strings.Contains(line, noCgroupManager) {
			t.Errorf("virt-handler's complaint is not KubeVirt's own: %s", line)
		}
		warned = true
	}
	return warned
}

// targetsLeft checks whether each volume's target is in launcher l's
// hotplug-disks, on the node (the launcher's process may be gone).
func targetsLeft(t *testing.T, step string, l types.UID, vols []peerVolume, want bool) {
	t.Helper()
	for _, v := range vols {
		_, err := os.Lstat(targetPath(l, v))
		if got := err == nil; got != want {
			t.Errorf("%s: %s's target present = %v, want %v (%v)", step, v.name, got, want, err)
		}
	}
}

func now() *metav1.Time {
	t := metav1.NewTime(time.Now())
	return &t
}

// migrateAway starts a migration of vmi from this node to another, as
// virt-controller and the source's migration controller write it.
func migrateAway(vmi *v1.VirtualMachineInstance) {
	vmi.Labels[v1.MigrationTargetNodeNameLabel] = "node-dst"
	vmi.Status.ActivePods["target-launcher"] = "node-dst"
	vmi.Status.MigrationState = &v1.VirtualMachineInstanceMigrationState{MigrationUID: "mig-away",
		SourceNode: nodeName, TargetNode: "node-dst", TargetPod: "launcher-dst", StartTimestamp: now()}
}

// migratedAway is that migration done: the VMI runs on the other node.
func migratedAway(vmi *v1.VirtualMachineInstance) {
	delete(vmi.Labels, v1.MigrationTargetNodeNameLabel)
	vmi.Labels[v1.NodeNameLabel], vmi.Status.NodeName = "node-dst", "node-dst"
	ms := vmi.Status.MigrationState
	ms.EndTimestamp, ms.Completed = now(), true
}
