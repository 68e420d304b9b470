// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/hpmount/hpmount/kubevirt"
)

// TestLauncherThatDoesNotReceiveMounts: a launcher whose compute view of
// hotplug-disks stopped receiving the node's mounts (as one started
// before the kubelet's pods dir was made rshared) never sees the bind.
// The agent says so (VolumeNotPropagated, state not-propagated) instead of
// MountedToPod, while a second VM on the same node is served as usual.
func TestLauncherThatDoesNotReceiveMounts(t *testing.T) {
	e := newEnv(t, "--report-volume-status")
	good := e.newVM("tenant-p", "seen")
	gv := good.addVolume("data", "ext4", 64<<20)
	good.newAttachmentPod(gv)

	v := e.newVM("tenant-p", "unseen")
	_, err := v.L.Exec("mount --make-private " + kubevirt.HotplugDisksMountPath)
	e.must(err)
	vol := v.addVolume("data", "ext4", 64<<20)
	v.newAttachmentPod(vol)
	v.apply()
	good.apply()

	good.waitMounted(gv)
	good.roundTrip(t, gv, "seen-by-its-launcher")
	ev := e.waitEvent(v.NS, v.Name, "VolumeNotPropagated", "data")
	if ev.Type != "Warning" || !strings.Contains(ev.Message, "HostToContainer") {
		t.Fatalf("event %s %q does not explain the cause", ev.Type, ev.Message)
	}
	e.eventually("state not-propagated", 10*time.Second, func() error {
		return e.volumeCount("Filesystem", "not-propagated", 1)
	})
	// Mounted on the node, yet the VMI is not told MountedToPod.
	if _, n := e.table().Top(v.Target(vol)); n != 1 {
		t.Fatalf("%d mounts on the target on the node, want 1", n)
	}
	if err := v.phaseIs("data", kubevirt.PhaseMountedToPod, kubevirt.ReasonMountedToPod); err == nil {
		t.Fatal("volumeStatus says MountedToPod for a volume the launcher does not see")
	}
	e.eventually("the other VM MountedToPod", 10*time.Second, func() error {
		return good.phaseIs("data", kubevirt.PhaseMountedToPod, kubevirt.ReasonMountedToPod)
	})
}
