// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hpmount/hpmount/test/harness"
	"github.com/hpmount/hpmount/test/simnode"
)

// outageLength is how long kube-apiserver stays down (issue #10: 60 s).
const outageLength = 60 * time.Second

// hotplugAfterOutage bounds the time from a hotplug written right after
// the server is ready again to its mount on the node: 5 s of catching up,
// plus the spread over which the agent's gate releases its informers after
// an outage this long (a quarter of it, agent/gate.go), so that a thousand
// nodes do not relist in the same second. client-go's own backoff would
// leave them stale for up to a minute more.
const hotplugAfterOutage = 5*time.Second + outageLength/4

// TestAPIOutage stops kube-apiserver for 60 s (etcd keeps running) under a
// node with a filesystem and a block volume mounted. During the outage no
// mount is touched and the agent stays alive and ready; the instant the
// server is ready again a second writer unplugs a volume of one VMI and
// hotplugs one into another, before the agent's watches can have come
// back. The hotplug must be mounted within 5 s, the unplug carried out,
// and the agent's counters must show no other change on the node.
func TestAPIOutage(t *testing.T) {
	e := newEnv(t)
	steady := e.newVM("tenant-o", "steady")
	data := steady.addVolume("data", "ext4", 64<<20)
	raw := steady.addVolume("raw", "", 32<<20)
	hp1 := steady.newAttachmentPod(data, raw)
	steady.apply()
	busy := e.newVM("tenant-o", "busy")
	old := busy.addVolume("old", "ext4", 64<<20)
	busy.newAttachmentPod(old)
	busy.apply()
	// Made now, written to the VMI only after the outage: the claim and
	// the disk exist, as provisioning does not need this node's agent.
	late := steady.addVolume("late", "xfs", 320<<20)

	fixed := map[string]int{"data": steady.waitMounted(data), "old": busy.waitMounted(old)}
	steady.waitNode(raw)
	rawNode := e.inode(steady.Target(raw))
	time.Sleep(3 * time.Second) // the follow-ups of the setup
	before := e.operations()

	var stopped, back time.Time
	calm := e.step("outage leaves the node and the agent alone", func(t *testing.T) {
		e.must(e.cluster.StopAPIServer())
		stopped = time.Now()
		if _, err := e.kube.CoreV1().Namespaces().Get(e.ctx, "default", metav1.GetOptions{}); err == nil {
			t.Fatal("the API server still answers after StopAPIServer")
		}
		end := time.Now().Add(outageLength)
		for time.Now().Before(end) {
			e.assertUntouched(t, map[*vm][]simnode.Volume{steady: {data}, busy: {old}}, fixed)
			if got := e.inode(steady.Target(raw)); got != rawNode {
				t.Fatalf("block node of raw replaced during the outage: inode %d, was %d", got, rawNode)
			}
			if err := e.agent.Alive(); err != nil {
				t.Fatalf("during the outage: %v", err)
			}
			if err := e.agent.Ready(); err != nil {
				t.Fatalf("during the outage: %v", err)
			}
			time.Sleep(time.Second)
		}
	})

	// The server comes back even when the outage step failed, so that
	// what failed is all that is reported.
	if !e.step("restart", func(t *testing.T) {
		began := time.Now()
		e.must(e.cluster.StartAPIServer(e.ctx))
		back = time.Now()
		t.Logf("kube-apiserver down for %s, ready %s after its start",
			back.Sub(stopped).Round(100*time.Millisecond), back.Sub(began).Round(time.Millisecond))
	}) || !calm {
		return
	}

	e.step("changes written the instant the server is back are caught up", func(t *testing.T) {
		// An unplug on one VMI, then a hotplug on the other: virt-controller
		// replaces the attachment pod with one carrying every volume.
		busy.RemoveVolume(old.Name)
		busy.apply()
		unplugged := time.Now()
		steady.replaceAttachmentPod(hp1, []simnode.Volume{data, raw}, data, raw, late)
		steady.apply()
		applied := time.Now()
		// Waits past the bound, so that a slow catch-up is measured, not
		// only failed.
		e.eventuallyFast("hotplug of late mounted", 150*time.Second, func() error {
			_, err := steady.MountID(late)
			return err
		})
		latency := time.Since(applied)
		busy.waitGone(old)
		t.Logf("after the restart: unplug written at +%s, hotplug written at +%s and mounted %s later",
			unplugged.Sub(back).Round(time.Millisecond), applied.Sub(back).Round(time.Millisecond), latency.Round(time.Millisecond))
		if latency > hotplugAfterOutage {
			t.Errorf("hotplug after the outage took %s, want at most %s", latency.Round(time.Millisecond), hotplugAfterOutage)
		}
	})

	e.step("nothing else changed on the node", func(t *testing.T) {
		time.Sleep(3 * time.Second) // resyncs after the catch-up
		delete(fixed, "old")
		e.assertUntouched(t, map[*vm][]simnode.Volume{steady: {data}}, fixed)
		if got := e.inode(steady.Target(raw)); got != rawNode {
			t.Fatalf("block node of raw replaced: inode %d, was %d", got, rawNode)
		}
		for _, vol := range []simnode.Volume{data, raw, late} {
			steady.roundTrip(t, vol, "after-the-outage-"+vol.Name)
		}
		want := map[string]float64{`op="attach",result="mounted"`: 1, `op="detach",result="removed"`: 1}
		for labels, d := range harness.CounterDelta(before, e.operations()) {
			changing := !strings.Contains(labels, `result="unchanged"`) && !strings.Contains(labels, `result="not-published"`)
			if changing && d != want[labels] {
				t.Errorf("hpmount_mount_operations_total{%s} rose by %v over the outage, want %v", labels, d, want[labels])
			}
		}
	})
}

// assertUntouched fails t unless each filesystem volume still has exactly
// its one bind, with the mount id recorded by volume name.
func (e *env) assertUntouched(t *testing.T, vols map[*vm][]simnode.Volume, ids map[string]int) {
	t.Helper()
	for v, list := range vols {
		for _, vol := range list {
			id, err := v.MountID(vol)
			if err != nil || id != ids[vol.Name] {
				t.Fatalf("%s/%s: mount id %d (%v), was %d", v.Name, vol.Name, id, err, ids[vol.Name])
			}
		}
	}
}

// inode identifies the file at path, to tell a kept block node from a
// recreated one.
func (e *env) inode(path string) uint64 {
	e.t.Helper()
	var st unix.Stat_t
	e.must(unix.Lstat(path, &st))
	return st.Ino
}

// operations reads hpmount_mount_operations_total from the agent.
func (e *env) operations() map[string]float64 {
	e.t.Helper()
	text, err := e.agent.Scrape()
	e.must(err)
	ops, err := harness.Counters(text, "hpmount_mount_operations_total")
	e.must(err)
	return ops
}

// eventuallyFast polls f every 20 ms, for a latency measured to better
// than Eventually's 100 ms.
func (e *env) eventuallyFast(what string, timeout time.Duration, f func() error) {
	e.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			e.t.Fatal(fmt.Errorf("%s: not within %s: %w", what, timeout, err))
		}
		time.Sleep(20 * time.Millisecond)
	}
}
