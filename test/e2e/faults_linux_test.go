// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"testing"
	"time"

	"github.com/hpmount/hpmount/test/harness"
)

// TestRapidAddAndRemove hotplugs and unplugs the same volume 50 times
// within 10 seconds (kubevirt#16937 is a livelock upstream): the node ends
// as the final spec says, with one mount, and the agent then goes idle.
func TestRapidAddAndRemove(t *testing.T) {
	e := newEnv(t)
	v := e.newVM("tenant-e", "flappy")
	vol := v.addVolume("flap", "ext4", 64<<20)
	pod := v.newAttachmentPod(vol)
	v.apply()
	v.waitMounted(vol)

	start := time.Now()
	for i := range 50 {
		if i%2 == 0 {
			v.RemoveVolume(vol.Name)
		} else {
			v.Vols = append(v.Vols, vol)
			v.Attach[vol.Name] = pod.UID
		}
		v.apply()
		time.Sleep(150 * time.Millisecond)
	}
	t.Logf("50 changes in %s", time.Since(start).Round(time.Millisecond))
	// The last change put the volume back: exactly one bind, the data
	// path working.
	v.waitMounted(vol)
	v.roundTrip(t, vol, "after-the-flapping")

	time.Sleep(3 * time.Second) // the follow-ups of the last changes
	before, err := harness.ReadProcStat(e.agent.Pid())
	e.must(err)
	time.Sleep(10 * time.Second)
	after, err := harness.ReadProcStat(e.agent.Pid())
	e.must(err)
	busy := after.CPU - before.CPU
	t.Logf("agent CPU over 10 s after converging: %s", busy)
	// A livelock keeps a core busy; an idle agent resyncs one VMI every
	// 2 s here.
	if busy > 1500*time.Millisecond {
		t.Fatalf("the agent used %s of CPU in 10 s after converging: not idle", busy)
	}
	if _, n := e.table().Top(v.Target(vol)); n != 1 {
		t.Fatalf("%d mounts on the target, want 1", n)
	}
}
