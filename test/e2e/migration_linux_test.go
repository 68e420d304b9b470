// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hpmount/hpmount/test/harness"
	"github.com/hpmount/hpmount/test/simnode"
)

// startNode adds a second simulated node with its own kubelet root and
// device cgroup subtree, and its own agent: two agents share this test
// process's mount namespace as their host, each confined to its root.
func (e *env) startNode(name string) (*simnode.Node, *harness.Agent) {
	e.t.Helper()
	return e.startNodeWith(name, e.kubeconfig)
}

// TestMigration: a VMI with a filesystem and a block hotplug volume
// migrates from node-1 to node-2, each served by its own agent; node-2's
// launcher reads through its own mounts what node-1's wrote, node-1's side
// is clean after the handoff, and a second migration that fails halfway
// leaves node-2 clean while the VM keeps its volumes on node-1.
func TestMigration(t *testing.T) {
	e := newEnv(t, "--report-volume-status")
	nodeB, agentB := e.startNode("node-2")

	v := e.newVM("tenant-m", "mig")
	data := v.addVolume("data", "ext4", 64<<20)
	raw := v.addVolume("raw", "", 32<<20)
	v.newAttachmentPod(data, raw)
	v.apply()
	v.waitMounted(data)
	v.waitNode(raw)
	v.roundTrip(t, data, "written-on-node-1")
	v.roundTrip(t, raw, "block-on-node-1")
	srcUID := v.Launcher.UID

	var m *harness.Migration
	e.step("target mounts every volume from the target attachment pod", func(t *testing.T) {
		start := time.Now()
		var err error
		m, err = v.StartMigration(e.ctx, nodeB)
		e.must(err)
		e.eventually("target launcher reads the data", 60*time.Second, func() error {
			return readsBack(m, data, "written-on-node-1", raw, "block-on-node-1")
		})
		t.Logf("handoff written to data readable through the target launcher: %s", time.Since(start).Round(time.Millisecond))
		e.waitEvent(v.NS, v.Name, "MigrationTargetReady", "All 2 hotplug volumes")
		text, err := agentB.Scrape()
		e.must(err)
		t.Logf("node-2: %s; %s", metricLine(text, "hpmount_migration_target_ready_seconds_sum"),
			metricLine(text, `hpmount_migration_events_total{event="target-ready"}`))
		// Node-1 still serves the source launcher meanwhile.
		v.roundTrip(t, data, "still-on-node-1")
	})

	e.step("after success node-1 is clean and node-2 keeps its mounts", func(t *testing.T) {
		before, err := harness.HostTable()
		e.must(err)
		top, _ := before.Top(m.TargetPath(data))
		if top == nil {
			t.Fatal("target not mounted before the handoff completed")
		}
		e.must(m.Complete(e.ctx))
		e.eventually("node-1 clean", 30*time.Second, func() error { return hotplugDirEmpty(e.node, string(srcUID)) })
		e.waitEvent(v.NS, v.Name, "MigrationSourceCleaned", "node-1")
		time.Sleep(3 * time.Second) // a resync of node-2
		id, err := v.MountID(data)
		e.must(err)
		if id != top.ID {
			t.Fatalf("node-2 remounted data after the handoff: mount %d, was %d", id, top.ID)
		}
		v.roundTrip(t, data, "written-on-node-2")
		v.roundTrip(t, raw, "block-on-node-2")
	})

	w := e.newVM("tenant-m", "fails")
	wdata := w.addVolume("data", "xfs", 320<<20)
	wraw := w.addVolume("raw", "", 32<<20)
	w.newAttachmentPod(wdata, wraw)
	w.apply()
	w.waitMounted(wdata)
	w.waitNode(wraw)
	e.step("a migration that fails halfway leaves node-2 clean", func(t *testing.T) {
		fm, err := w.StartMigration(e.ctx, nodeB)
		e.must(err)
		e.eventually("target mounted", 60*time.Second, func() error { return readsBack(fm, wdata, "", wraw, "") })
		e.must(fm.Fail(e.ctx))
		e.eventually("node-2 clean while the target pod lingers", 30*time.Second, func() error {
			return hotplugDirEmpty(nodeB, string(fm.Launcher.UID))
		})
		e.waitEvent(w.NS, w.Name, "MigrationTargetCleaned", "failed")
		w.roundTrip(t, wdata, "source-unharmed")
		w.roundTrip(t, wraw, "source-block-unharmed")
		e.must(fm.Forget(e.ctx))
		time.Sleep(3 * time.Second) // a resync of both nodes
		e.must(hotplugDirEmpty(nodeB, string(fm.Launcher.UID)))
		w.roundTrip(t, wdata, "source-still-unharmed")
	})
}

// readsBack reads each volume's pattern through the target launcher; an
// empty pattern only checks the entry is readable.
func readsBack(m *harness.Migration, fs simnode.Volume, fsWant string, blk simnode.Volume, blkWant string) error {
	for _, c := range []struct {
		vol  simnode.Volume
		want string
	}{{fs, fsWant}, {blk, blkWant}} {
		off := int64(1 << 20)
		if c.vol.Block {
			off = 4096
		}
		got, err := harness.ReadThrough(m.L, m.TargetPath(c.vol), off, max(len(c.want), 1))
		if err != nil {
			return err
		}
		if c.want != "" && got != c.want {
			return fmt.Errorf("%s through the target launcher: %q, want %q", c.vol.Name, got, c.want)
		}
	}
	return nil
}

// hotplugDirEmpty fails unless a launcher's hotplug-disks on node holds
// nothing and nothing is mounted beneath it.
func hotplugDirEmpty(n *simnode.Node, launcher string) error {
	dir := n.HotplugDisksDir(launcher)
	entries, err := os.ReadDir(dir)
	if err != nil && !os.IsNotExist(err) {
		return err
	}
	if len(entries) > 0 {
		return fmt.Errorf("%s still holds %d entries", dir, len(entries))
	}
	t, err := harness.HostTable()
	if err != nil {
		return err
	}
	for _, m := range t.Mounts() {
		if strings.HasPrefix(m.MountPoint, dir+"/") {
			return fmt.Errorf("%s still mounted", m.MountPoint)
		}
	}
	return nil
}

func metricLine(text, prefix string) string {
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, prefix) {
			return l
		}
	}
	return prefix + " absent"
}
