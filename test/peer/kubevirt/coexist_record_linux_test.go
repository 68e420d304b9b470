// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package peer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/kubevirt"
)

// recordVolumes are the volumes of the record tests: one that stays and
// one of each kind that leaves the spec.
func recordVolumes() []peerVolume {
	return []peerVolume{
		{name: "fs", mode: kubevirt.Filesystem, fstype: "ext4"},
		{name: "ext", mode: kubevirt.Filesystem, fstype: "ext4"},
		{name: "blk", mode: kubevirt.Block},
	}
}

// unplugExtBlk takes ext and blk out of the spec.
func (n *coNode) unplugExtBlk() { n.vols = []peerVolume{n.volume("fs")} }

// kvRecord is KubeVirt's record file of the node's VMI ("" if none).
func (n *coNode) kvRecord(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(n.stateDir, string(n.vmi().UID)))
	if errors.Is(err, os.ErrNotExist) {
		return ""
	}
	must(t, err)
	return string(b)
}

// TestCoexistenceUnplugRecordedTarget: KubeVirt bound a volume (its record
// file names the target); the volume leaves the spec and hpmount's pass
// detaches it before virt-handler's sync. virt-handler's Unmount then
// opens every recorded target before it looks at any, fails on the gone
// one with ENOENT, returns before it rewrites the record, and so fails
// the same way on every later sync of the VMI, until the VMI is deleted
// (UnmountAll skips a gone target). The node itself is right: hpmount
// removed what left the spec, and the volume that stays is untouched.
// With KubeVirt's sync first (the other subtest) nothing fails. On a live
// VMI, an empty regular file at each gone recorded target lets
// virt-handler's next Unmount through (it drops the entry), after which
// the files can go.
func TestCoexistenceUnplugRecordedTarget(t *testing.T) {
	testutil.RequiresRoot(t)
	for _, hpmountDetachesFirst := range []bool{true, false} {
		name := "kubevirt-unmounts-first"
		if hpmountDetachesFirst {
			name = "hpmount-detaches-first"
		}
		t.Run(name, func(t *testing.T) {
			n := newCoNode(t, "ur"+name[:1], recordVolumes())
			must(t, n.kubeVirtSync())
			n.hpmountSync(t, "sync")
			t.Logf("KubeVirt's record after the hotplug: %s", n.kvRecord(t))
			n.unplugExtBlk()
			var kvErrs []error
			for pass := range 3 {
				if hpmountDetachesFirst || pass > 0 {
					n.hpmountSync(t, "sync")
				}
				kvErrs = append(kvErrs, n.kubeVirtSync())
				if !hpmountDetachesFirst && pass == 0 {
					n.hpmountSync(t, "sync")
				}
			}
			t.Logf("KubeVirt's Unmount on 3 syncs: %v", kvErrs)
			t.Logf("KubeVirt's record after them: %s", n.kvRecord(t))
			if _, bad := n.checkSpec(t); len(bad) > 0 {
				t.Errorf("the node after the unplug: %s", strings.Join(bad, "; "))
			}
			for i, err := range kvErrs {
				endless := hpmountDetachesFirst && err != nil && errors.Is(err, os.ErrNotExist) && strings.HasPrefix(err.Error(), "Unmount: ")
				if endless != hpmountDetachesFirst {
					t.Errorf("KubeVirt's sync %d: %v; want it to fail on the gone target: %v", i, err, hpmountDetachesFirst)
				}
			}
			if hpmountDetachesFirst {
				// The way out on a live VMI: an empty regular file at
				// each recorded target that is gone. virt-handler's
				// next Unmount finds it unmounted, drops it from its
				// record and succeeds; the files are then removed.
				var made []string
				for _, v := range []string{"ext", "blk"} {
					p := targetPath(n.launcher, n.volume(v))
					must(t, os.WriteFile(p, nil, 0o600))
					made = append(made, p)
				}
				err := n.kubeVirtSync()
				t.Logf("KubeVirt's sync with empty files at the gone targets: %v; record %s", err, n.kvRecord(t))
				if err != nil || strings.Contains(n.kvRecord(t), "ext.img") {
					t.Errorf("the empty files did not let KubeVirt's Unmount through: %v", err)
				}
				for _, p := range made {
					must(t, os.Remove(p))
				}
				must(t, n.kubeVirtSync())
			}
			// The VMI is deleted: UnmountAll skips the gone target and
			// drops the record; hpmount removes the rest.
			must(t, n.kvMounter.UnmountAll(n.vmiNow(), n.kvCgroup))
			n.gone, n.deleted = append(n.gone, n.launcher), true
			n.hpmountSync(t, "sync")
			if r := n.kvRecord(t); r != "" {
				t.Errorf("KubeVirt's record after UnmountAll: %s", r)
			}
			if _, bad := n.checkSpec(t); len(bad) > 0 {
				t.Errorf("the node after the VMI's deletion: %s", strings.Join(bad, "; "))
			}
		})
	}
}

// TestCoexistenceCrashRecord: virt-handler crashes (a fresh VolumeMounter
// on the same state directory is the restarted one) with its record file
// naming targets it bound, and hpmount's passes go on meanwhile.
//   - mount-still-there: nothing changed while it was down; the restarted
//     virt-handler and hpmount both leave the node as it is, and when the
//     volumes leave the spec the restarted one unmounts from its record.
//   - mount-gone: the volumes left the spec while it was down and hpmount
//     detached them; the restarted virt-handler's Unmount fails on the
//     record's gone target at every sync (as in
//     TestCoexistenceUnplugRecordedTarget).
//   - launcher-gone: the launcher pod and its directory are gone too; the
//     restarted virt-handler drops the record without an error.
func TestCoexistenceCrashRecord(t *testing.T) {
	testutil.RequiresRoot(t)
	for i, c := range []struct {
		name        string
		whileDown   func(t *testing.T, n *coNode)
		wantEndless bool
	}{
		{name: "mount-still-there", whileDown: func(t *testing.T, n *coNode) { n.hpmountSync(t, "sync") }},
		{name: "mount-gone", wantEndless: true, whileDown: func(t *testing.T, n *coNode) {
			n.unplugExtBlk()
			n.hpmountSync(t, "sync")
		}},
		{name: "launcher-gone", whileDown: func(t *testing.T, n *coNode) {
			n.gone, n.deleted = append(n.gone, n.launcher), true
			n.hpmountSync(t, "sync")
			n.launcherPod.stop()
			must(t, os.RemoveAll(filepath.Join(podsDir, string(n.launcher))))
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := newCoNode(t, fmt.Sprintf("cr%d", i), recordVolumes())
			must(t, n.kubeVirtSync())
			record := n.kvRecord(t)
			if record == "" {
				t.Fatal("KubeVirt's Mount wrote no record")
			}
			n.restartKubeVirt() // the crash: only the record file is left
			c.whileDown(t, n)
			var kvErrs []error
			for range 3 {
				kvErrs = append(kvErrs, n.kubeVirtSync())
			}
			t.Logf("record before: %s; KubeVirt's syncs after the restart: %v; record after: %s", record, kvErrs, n.kvRecord(t))
			for i, err := range kvErrs {
				endless := err != nil && errors.Is(err, os.ErrNotExist)
				if endless != c.wantEndless || err != nil && !endless {
					t.Errorf("KubeVirt's sync %d after the restart: %v; want it to fail on a gone target: %v", i, err, c.wantEndless)
				}
			}
			if !n.deleted {
				// The volumes leave the spec (or already have): the
				// restarted virt-handler syncs first, then hpmount.
				n.unplugExtBlk()
				err := n.kubeVirtSync()
				n.hpmountSync(t, "sync")
				t.Logf("unplug after the restart: KubeVirt %v; record %s", err, n.kvRecord(t))
			}
			if _, bad := n.checkSpec(t); len(bad) > 0 {
				t.Errorf("the node: %s", strings.Join(bad, "; "))
			}
		})
	}
}
