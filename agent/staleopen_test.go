// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"strings"
	"sync"
	"testing"

	"github.com/hpmount/hpmount/kubevirt"
)

// staleObserver records the last hpmount_volume_stale_open value per volume.
type staleObserver struct {
	NopObserver
	mu    sync.Mutex
	stale map[string]bool
}

var _ Observer = (*staleObserver)(nil)

func (o *staleObserver) VolumeStaleOpen(_, _, volume string, stale bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.stale[volume] = stale
}

func (o *staleObserver) get(volume string) (stale, reported bool) {
	o.mu.Lock()
	defer o.mu.Unlock()
	stale, reported = o.stale[volume]
	return stale, reported
}

// TestStaleOpenReported: a volume the engine observes stale-open gets one
// VolumeStaleOpen Warning naming what QEMU holds and the gauge at 1; a
// resync repeats neither the Warning nor anything else; once QEMU no
// longer holds it stale the gauge is 0, and a new stale-open warns again.
func TestStaleOpenReported(t *testing.T) {
	obs := &staleObserver{stale: map[string]bool{}}
	ta := standardAgent(t, func(c *Config) { c.Observer, c.GrowFilesystems = obs, false })
	ta.setVMI(t, vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: attachUID}, vol{Name: "blk", Claim: "c2", AttachUID: attachUID, Mode: "Block"}))
	const why = "QEMU (pid 4242, fd 17) holds /var/run/kubevirt/hotplug-disks/blk as device 7:3, but the volume is now device 7:4"
	observe := func(stale bool) {
		blk := healthyObserved("blk", kubevirt.Block)
		if stale {
			blk.StaleOpen, blk.StaleWhy = true, why
		}
		ta.engine.setObserved(launcherUID, healthyObserved("hp", kubevirt.Filesystem), blk)
	}
	for _, pass := range []struct {
		name     string
		stale    bool
		resync   bool
		warnings int
	}{
		{"becomes stale-open", true, false, 1},
		{"resync while stale-open", true, true, 0},
		{"QEMU reopened it", false, false, 0},
		{"stale-open again", true, true, 1},
	} {
		t.Run(pass.name, func(t *testing.T) {
			observe(pass.stale)
			ta.mu.Lock()
			ta.resync[testKey] = pass.resync
			ta.mu.Unlock()
			if err := ta.reconcile(context.Background(), testKey); err != nil {
				t.Fatal(err)
			}
			var warnings []string
			for _, e := range ta.events() {
				if strings.HasPrefix(e, "Warning "+EventStaleOpen+" ") {
					warnings = append(warnings, e)
				} else if strings.HasPrefix(e, "Warning") {
					t.Errorf("unexpected Warning %q", e)
				}
			}
			if len(warnings) != pass.warnings {
				t.Fatalf("%d %s Warnings %q, want %d", len(warnings), EventStaleOpen, warnings, pass.warnings)
			}
			for _, w := range warnings {
				if !strings.Contains(w, "Volume blk") || !strings.Contains(w, why) || !strings.Contains(w, "never acts on QEMU") {
					t.Errorf("Warning %q does not name the volume, what QEMU holds and what to do", w)
				}
			}
			if got, ok := obs.get("blk"); !ok || got != pass.stale {
				t.Errorf("blk stale-open gauge = %v (reported %v), want %v", got, ok, pass.stale)
			}
			if got, ok := obs.get("hp"); !ok || got {
				t.Errorf("hp stale-open gauge = %v (reported %v), want 0", got, ok)
			}
			// A stale-open volume is healthy on the node: nothing to
			// attach outside a resync's verify, and nothing ever detached.
			for _, c := range ta.engine.changing() {
				if strings.HasPrefix(c, "detach") || strings.HasPrefix(c, "attach") && !pass.resync {
					t.Errorf("the agent acted on a stale-open volume: %s", c)
				}
			}
			ta.engine.reset()
		})
	}
}
