// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/hpmount/hpmount/test/simnode"
)

// hungCallTimeout is the agent's --call-timeout in
// TestHungSourceBesideHealthyVolumes: each pass that checks the hung volume
// waits this long for it, so a short one keeps the test quick.
const hungCallTimeout = 3 * time.Second

// TestHungSourceBesideHealthyVolumes is a VMI with three hotplug volumes
// whose one filesystem volume's storage stops answering (#19, defect 4):
// its source is a FUSE filesystem whose server answers nothing any more,
// as a hard-mounted NFS export whose server is gone. The agent reports
// that volume on its own (a HotplugStuck Warning and state failed, its
// bind left alone), while the VMI's other volumes go on: one is unplugged,
// one hotplugged beside them, the block volume keeps working. Once the
// storage is gone for good (the FUSE connection aborted) its unplug
// completes too. It runs with mount events on and off: events wake extra
// passes, which must not change the verdict.
func TestHungSourceBesideHealthyVolumes(t *testing.T) {
	for _, events := range []string{"--mount-events=false", "--mount-events=true"} {
		t.Run(events, func(t *testing.T) { hungSourceBesideHealthyVolumes(t, events) })
	}
}

func hungSourceBesideHealthyVolumes(t *testing.T, events string) {
	e := newEnv(t, "--call-timeout", hungCallTimeout.String(), events)
	v := e.newVM("tenant-hung", "mixed")
	keep := v.addVolume("keep", "ext4", 64<<20)
	raw := v.addVolume("raw", "", 32<<20)
	hung := simnode.Volume{Name: "hung", Claim: v.Name + "-hung", PV: "pvc-" + string(v.UID)[:8] + "-hung", Capacity: simnode.Mi(64)}
	e.must(e.ctrl.CreatePVC(e.ctx, v.NS, hung))
	v.Vols = append(v.Vols, hung)
	pod, err := e.ctrl.CreateAttachmentPod(e.ctx, v.Launcher, []simnode.Volume{keep, raw, hung})
	e.must(err)
	v.publish(pod.UID, keep)
	v.publish(pod.UID, raw)
	fs, err := e.node.PublishHanging(string(pod.UID), hung.PV)
	e.must(err)
	t.Cleanup(fs.Abort) // before the node and the agent go
	for _, vol := range v.Vols {
		v.Attach[vol.Name] = pod.UID
	}
	v.apply()
	v.waitMounted(keep)
	hungID := v.waitMounted(hung)
	v.waitNode(raw)
	rawNode := e.inode(v.Target(raw))
	health := e.watchHealth()

	e.step("the hung volume is reported on its own", func(t *testing.T) {
		// The storage hangs only once the agent has checked the volume
		// and remembers it healthy: from then on only its probe of the
		// storage reaches the filesystem (TestObserveFindsStorageThatHangsLater).
		e.eventually("both filesystem volumes verified", 60*time.Second, func() error {
			return e.volumeCount("Filesystem", "mounted", 2)
		})
		fs.Hang()
		ev := e.waitEvent(v.NS, v.Name, "HotplugStuck", "Volume hung")
		t.Logf("%s %s: %s", ev.Type, ev.Reason, ev.Message)
		if ev.Type != "Warning" {
			t.Fatalf("event type %s", ev.Type)
		}
		e.eventually("the hung volume counted failed, the other mounted", 60*time.Second, func() error {
			if err := e.volumeCount("Filesystem", "failed", 1); err != nil {
				return err
			}
			return e.volumeCount("Filesystem", "mounted", 1)
		})
	})

	late := v.addVolume("late", "ext4", 64<<20)
	e.step("the VMI's other volumes attach and detach meanwhile", func(t *testing.T) {
		v.newAttachmentPod(late)
		v.apply()
		v.waitMounted(late)
		v.roundTrip(t, late, "beside-a-hung-volume")
		v.RemoveVolume(keep.Name)
		v.apply()
		v.waitGone(keep)
		e.waitEvent(v.NS, v.Name, "VolumeUnmounted", "Volume keep ")
		v.roundTrip(t, raw, "block-beside-a-hung-volume")
		if got := e.inode(v.Target(raw)); got != rawNode {
			t.Fatalf("block node of raw replaced: inode %d, was %d", got, rawNode)
		}
		if id, err := v.MountID(hung); err != nil || id != hungID {
			t.Fatalf("the hung volume's bind: mount %d (%v), was %d", id, err, hungID)
		}
		for _, ev := range e.events(v.NS, v.Name) {
			if ev.Type == "Warning" && !strings.HasPrefix(ev.Message, "Volume hung") {
				t.Errorf("a Warning about another volume than the hung one: %s %s", ev.Reason, ev.Message)
			}
		}
		e.must(health())
	})

	e.step("once the storage is gone for good, its unplug completes", func(t *testing.T) {
		fs.Abort()
		v.RemoveVolume(hung.Name)
		v.apply()
		v.waitGone(hung)
		if _, err := v.MountID(late); err != nil {
			t.Fatal(err)
		}
		e.must(health())
	})
}
