// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/types"
)

func TestSnapshotsShareAReadUntilALauncherChanges(t *testing.T) {
	var c snapshots
	now := time.Now()
	a, b := types.UID("a"), types.UID("b")
	if _, ok := c.fresh(now, []types.UID{a}); ok {
		t.Fatal("an empty cache served a snapshot")
	}
	start := c.begin()
	c.store(fakeSnapshot{n: 1}, start, now)
	for _, tc := range []struct {
		name      string
		at        time.Time
		launchers []types.UID
		want      bool
	}{
		{"same launcher", now, []types.UID{a}, true},
		{"another launcher", now, []types.UID{b}, true},
		{"no launcher", now, nil, true},
		{"too old", now.Add(snapshotMaxAge + time.Millisecond), []types.UID{a}, false},
	} {
		if _, ok := c.fresh(tc.at, tc.launchers); ok != tc.want {
			t.Errorf("%s: fresh = %v, want %v", tc.name, ok, tc.want)
		}
	}
	// a changes after the read: stale for a, still good for b.
	c.touched(a)
	if _, ok := c.fresh(now, []types.UID{a}); ok {
		t.Error("a snapshot older than a's change was served for a")
	}
	if _, ok := c.fresh(now, []types.UID{b}); !ok {
		t.Error("a change of a made the snapshot stale for b")
	}
	if _, ok := c.fresh(now, []types.UID{b, a}); ok {
		t.Error("a snapshot stale for one of the launchers was served")
	}
	// A read that began before the change does not count as current for
	// a, even if it is stored after the change.
	early := c.begin()
	c.touched(a)
	c.store(fakeSnapshot{n: 2}, early, now)
	if _, ok := c.fresh(now, []types.UID{a}); ok {
		t.Error("a read begun before a's change was served for a")
	}
	late := c.begin()
	c.store(fakeSnapshot{n: 3}, late, now)
	if s, ok := c.fresh(now, []types.UID{a}); !ok || s.Entries() != 3 {
		t.Errorf("fresh after a new read = %v, %v; want the new read", s, ok)
	}
	if len(c.changed) != 0 {
		t.Errorf("changes covered by the new read are still remembered: %v", c.changed)
	}
	// An older read never replaces a newer one.
	c.store(fakeSnapshot{n: 4}, early, now)
	if s, _ := c.fresh(now, nil); s.Entries() != 3 {
		t.Errorf("an older read replaced a newer one")
	}
}

// TestLostMountChangesDropTheSharedSnapshot: when the node reports mount
// changes lost, the passes it brings read the table again, whichever
// launchers they serve: the shared snapshot is dropped, and a read begun
// before the loss is not shared when it ends.
func TestLostMountChangesDropTheSharedSnapshot(t *testing.T) {
	ta := standardAgent(t, nil)
	now := time.Now()
	inFlight := ta.snaps.begin()
	ta.snaps.store(fakeSnapshot{n: 1}, ta.snaps.begin(), now)
	if _, ok := ta.snaps.fresh(now, []types.UID{launcherUID}); !ok {
		t.Fatal("a snapshot just stored is not shared")
	}
	ta.mountsChanged(&mountHolds{}, MountChange{Lost: true}, now)
	if _, ok := ta.snaps.fresh(now, []types.UID{launcherUID}); ok {
		t.Fatal("after lost mount changes the snapshot read before them is still shared")
	}
	ta.snaps.store(fakeSnapshot{n: 2}, inFlight, now)
	if _, ok := ta.snaps.fresh(now, []types.UID{launcherUID}); ok {
		t.Fatal("a read begun before the loss is shared after it")
	}
	ta.snaps.store(fakeSnapshot{n: 3}, ta.snaps.begin(), now)
	if _, ok := ta.snaps.fresh(now, []types.UID{launcherUID}); !ok {
		t.Fatal("a read begun after the loss is not shared")
	}
}
