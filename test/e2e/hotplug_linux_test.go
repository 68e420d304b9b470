// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestHotplugLifecycle walks one VMI through hotplug, unplug, attachment-pod
// replacement, an agent crash and deletion.
func TestHotplugLifecycle(t *testing.T) {
	e := newEnv(t, "--report-volume-status")
	v := e.newVM("tenant-a", "vm1")
	data := v.addVolume("data", "ext4", 64<<20)
	raw := v.addVolume("raw", "", 32<<20)
	hp1 := v.newAttachmentPod(data, raw)
	v.apply()

	var dataMount int
	e.step("hotplug filesystem and block volume", func(t *testing.T) {
		dataMount = v.waitMounted(data)
		v.waitNode(raw)
		v.roundTrip(t, data, "hpmount-fs-pattern")
		v.roundTrip(t, raw, "hpmount-block-pattern")
		e.waitEvent(v.NS, v.Name, "VolumeMounted", "data")
		e.waitEvent(v.NS, v.Name, "VolumeMounted", "raw")
		var st unix.Stat_t
		if err := unix.Stat(v.Target(data), &st); err != nil || st.Uid != 107 || st.Gid != 107 {
			t.Fatalf("disk image owner %d:%d (%v), want 107:107", st.Uid, st.Gid, err)
		}
		e.eventually("volumeStatus MountedToPod", 30*time.Second, func() error {
			return v.phaseIs("data", "MountedToPod", "VolumeMountedToPod")
		})
	})

	e.step("unplug block volume leaves the other untouched", func(t *testing.T) {
		v.RemoveVolume("raw")
		v.apply()
		v.waitGoneNode(raw)
		e.waitEvent(v.NS, v.Name, "VolumeUnmounted", "raw")
		if id := v.waitMounted(data); id != dataMount {
			t.Fatalf("data was remounted: mount id %d, was %d", id, dataMount)
		}
		v.roundTrip(t, data, "still-here-after-unplug")
	})

	second := v.addVolume("second", "xfs", 320<<20)
	e.step("second hotplug replaces the attachment pod", func(t *testing.T) {
		v.replaceAttachmentPod(hp1, []simnodeVolume{data}, second)
		v.apply()
		v.waitMounted(second)
		// The first volume's CSI mount is gone; its bind in the launcher
		// keeps it alive and the agent must neither drop nor double it.
		time.Sleep(3 * time.Second) // a resync period passes
		if id := v.waitMounted(data); id != dataMount {
			t.Fatalf("data was remounted after the attachment pod was replaced: %d, was %d", id, dataMount)
		}
		v.roundTrip(t, data, "after-replacement")
		v.roundTrip(t, second, "second-volume")
	})

	e.step("agent restart adopts without a mount syscall", func(t *testing.T) {
		before := e.table()
		ids := map[string]int{}
		for _, vol := range []simnodeVolume{data, second} {
			top, _ := before.Top(v.Target(vol))
			ids[vol.Name] = top.ID
		}
		mountedEvents := countReason(e.events(v.NS, v.Name), "VolumeMounted")
		if err := e.agent.Cmd.Process.Signal(unix.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-e.agent.Done()
		e.startAgent()
		time.Sleep(5 * time.Second) // two resyncs
		after := e.table()
		for name, id := range ids {
			vol := v.vol(name)
			top, n := after.Top(v.Target(vol))
			if top == nil || top.ID != id || n != 1 {
				t.Fatalf("%s after restart: top %+v, %d mounts; was mount %d", name, top, n, id)
			}
		}
		if got := countReason(e.events(v.NS, v.Name), "VolumeMounted"); got != mountedEvents {
			t.Fatalf("restart produced %d new VolumeMounted events", got-mountedEvents)
		}
		e.assertNoChangingOps(t)
	})

	e.step("deleting the VMI cleans everything", func(t *testing.T) {
		if err := e.ctrl.DeleteVMI(e.ctx, v.NS, v.Name); err != nil {
			t.Fatal(err)
		}
		v.waitGone(data)
		v.waitGone(second)
		entries, err := os.ReadDir(e.node.HotplugDisksDir(string(v.Launcher.UID)))
		if err != nil || len(entries) != 0 {
			t.Fatalf("hotplug-disks still holds %v (%v)", entries, err)
		}
	})
}

func countReason(events []eventT, reason string) int {
	n := 0
	for _, ev := range events {
		if ev.Reason == reason {
			n += int(max(ev.Count, 1))
		}
	}
	return n
}

// assertNoChangingOps reads the agent's own counters: every engine call
// since it started reported "unchanged" (or "not-published").
func (e *env) assertNoChangingOps(t *testing.T) {
	t.Helper()
	text, err := e.agent.Scrape()
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "hpmount_mount_operations_total{") {
			continue
		}
		if strings.Contains(line, `result="unchanged"`) || strings.Contains(line, `result="not-published"`) || strings.HasSuffix(line, " 0") {
			continue
		}
		t.Fatalf("restarted agent changed something: %s", line)
	}
}

func (v *vm) phaseIs(volume, phase, reason string) error {
	obj, err := v.e.dyn.Resource(vmiResource).Namespace(v.NS).Get(v.e.ctx, v.Name, getOpts)
	if err != nil {
		return err
	}
	statuses, _, _ := unstructuredSlice(obj.Object, "status", "volumeStatus")
	for _, s := range statuses {
		m, _ := s.(map[string]any)
		if m["name"] == volume {
			if m["phase"] == phase && m["reason"] == reason {
				return nil
			}
			return fmt.Errorf("volume %s: phase %v reason %v", volume, m["phase"], m["reason"])
		}
	}
	return fmt.Errorf("volume %s has no status", volume)
}

func (v *vm) vol(name string) simnodeVolume {
	for _, vol := range v.Vols {
		if vol.Name == name {
			return vol
		}
	}
	v.e.t.Fatalf("no volume %q", name)
	return simnodeVolume{}
}

func (v *vm) waitGoneNode(vol simnodeVolume) {
	v.e.t.Helper()
	v.e.eventually("node "+vol.Name+" removed", 60*time.Second, func() error {
		if _, err := os.Lstat(v.Target(vol)); err == nil {
			return fmt.Errorf("still there")
		}
		return nil
	})
}

// TestCleanupWhileAgentDown: the agent is stopped with SIGTERM (mounts stay)
// and the VMI and its launcher are deleted while it is not running. The restarted agent has no memory of them; it finds
// the launcher's leftovers on disk and cleans them, so the kubelet can
// remove the pod's directory.
func TestCleanupWhileAgentDown(t *testing.T) {
	e := newEnv(t)
	v := e.newVM("tenant-d", "gone")
	data := v.addVolume("data", "ext4", 64<<20)
	raw := v.addVolume("raw", "", 32<<20)
	v.newAttachmentPod(data, raw)
	v.apply()
	v.waitMounted(data)
	v.waitNode(raw)

	// SIGTERM: the agent stops cleanly and leaves every mount in place.
	ids := map[string]int{}
	top, _ := e.table().Top(v.Target(data))
	ids["data"] = top.ID
	if err := e.agent.Cmd.Process.Signal(unix.SIGTERM); err != nil {
		t.Fatal(err)
	}
	<-e.agent.Done()
	if st := e.agent.Cmd.ProcessState; st == nil || !st.Success() {
		t.Fatalf("agent did not exit cleanly on SIGTERM: %v", st)
	}
	if top, n := e.table().Top(v.Target(data)); top == nil || top.ID != ids["data"] || n != 1 {
		t.Fatalf("SIGTERM disturbed the mount: %+v, %d mounts", top, n)
	}
	if _, err := os.Lstat(v.Target(raw)); err != nil {
		t.Fatalf("SIGTERM removed the block node: %v", err)
	}
	if err := e.ctrl.DeleteVMI(e.ctx, v.NS, v.Name); err != nil {
		t.Fatal(err)
	}
	// Grace period 0: the pod object goes at once, as after the kubelet
	// confirmed its containers stopped.
	if err := e.kube.CoreV1().Pods(v.NS).Delete(e.ctx, v.Launcher.Name, metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	e.startAgent()
	v.waitGone(data)
	v.waitGoneNode(raw)
}
