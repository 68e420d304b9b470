// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package peer

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

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

// TestCoexistenceUnplugRecordedTarget: KubeVirt bound the volumes (its
// record file names the targets) and ext, blk and gone leave the spec. hpmount
// leaves a target virt-handler's record names to virt-handler
// (left-to-virt-handler), in either order, so virt-handler's Unmount finds
// every recorded target and removes them without an error. Before that
// rule, hpmount going first made virt-handler's Unmount fail on the gone
// target (ENOENT) at every sync of the VMI until it was deleted.
//   - stuck: the record also names a target that is gone (virt-handler
//     bound it, then someone removed it, as kubevirt#16532's duplicate
//     entries do): virt-handler's Unmount fails at every sync whatever
//     hpmount does, so once the record stayed so (engine.Config.
//     HandlerStuckAfter) nothing is left to it and hpmount removes ext
//     and blk itself.
func TestCoexistenceUnplugRecordedTarget(t *testing.T) {
	testutil.RequiresRoot(t)
	for _, c := range []struct {
		name         string
		hpmountFirst bool
		stuck        bool
	}{
		{name: "hpmount-first", hpmountFirst: true},
		{name: "kubevirt-first"},
		{name: "stuck", hpmountFirst: true, stuck: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := newCoNode(t, "ur"+c.name[:1], append(recordVolumes(), peerVolume{name: "gone", mode: kubevirt.Filesystem, fstype: "ext4"}))
			must(t, n.kubeVirtSync())
			n.hpmountSync(t, "sync")
			t.Logf("KubeVirt's record after the hotplug: %s", n.kvRecord(t))
			if c.stuck {
				// The recorded target of "gone" disappears behind
				// virt-handler's back, and the volume with it. A
				// record stuck that way is taken for stuck once it
				// stayed so for a while; each hpmount pass here is a
				// new process, so at once.
				n.stuckAtOnce = true
				p := targetPath(n.launcher, n.volume("gone"))
				must(t, unix.Unmount(p, unix.MNT_DETACH))
				must(t, os.Remove(p))
			}
			n.unplugExtBlk()
			var kvErrs []error
			var left []string
			for pass := range 3 {
				if c.hpmountFirst || pass > 0 {
					left = append(left, leftToHandler(n.hpmountSync(t, "sync"))...)
				}
				kvErrs = append(kvErrs, n.kubeVirtSync())
				if !c.hpmountFirst && pass == 0 {
					left = append(left, leftToHandler(n.hpmountSync(t, "sync"))...)
				}
			}
			t.Logf("KubeVirt's Unmount on 3 syncs: %v; hpmount left to virt-handler: %v; record after them: %s", kvErrs, left, n.kvRecord(t))
			if _, bad := n.checkSpec(t); len(bad) > 0 {
				t.Errorf("the node after the unplug: %s", strings.Join(bad, "; "))
			}
			wantLeft := []string{"blk", "ext", "gone"}
			if !c.hpmountFirst || c.stuck {
				wantLeft = nil
			}
			if !slices.Equal(left, wantLeft) {
				t.Errorf("hpmount left %v to virt-handler, want %v", left, wantLeft)
			}
			for i, err := range kvErrs {
				stuck := err != nil && errors.Is(err, os.ErrNotExist) && strings.HasPrefix(err.Error(), "Unmount: ")
				if err != nil && !stuck || stuck != c.stuck {
					t.Errorf("KubeVirt's sync %d: %v; want it failing on the gone target: %v", i, err, c.stuck)
				}
			}
			// The VMI is deleted: UnmountAll skips a gone target and
			// drops the record; hpmount removes the rest.
			must(t, n.kubeVirtCleanup())
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

// leftToHandler lists, sorted, the volumes a sync left to virt-handler.
func leftToHandler(outcomes map[string]string) []string {
	var out []string
	for name, o := range outcomes {
		if o == "detach left-to-virt-handler" {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// TestCoexistenceCrashRecord: virt-handler crashes (a fresh VolumeMounter
// on the same state directory is the restarted one) with its record file
// naming targets it bound, and hpmount's passes go on meanwhile.
//   - mount-still-there: nothing changed while it was down; the restarted
//     virt-handler and hpmount both leave the node as it is, and when the
//     volumes leave the spec the restarted one unmounts from its record.
//   - unplugged-while-down: the volumes left the spec while it was down;
//     hpmount leaves the recorded targets to it, and the restarted
//     virt-handler removes them without an error (before hpmount read
//     the record, it removed them and virt-handler's Unmount failed on
//     the gone target at every sync).
//   - launcher-gone: the launcher pod and its directory are gone too; the
//     restarted virt-handler drops the record without an error.
func TestCoexistenceCrashRecord(t *testing.T) {
	testutil.RequiresRoot(t)
	for i, c := range []struct {
		name      string
		whileDown func(t *testing.T, n *coNode)
	}{
		{name: "mount-still-there", whileDown: func(t *testing.T, n *coNode) { n.hpmountSync(t, "sync") }},
		{name: "unplugged-while-down", whileDown: func(t *testing.T, n *coNode) {
			n.unplugExtBlk()
			n.hpmountSync(t, "sync")
		}},
		{name: "launcher-gone", whileDown: func(t *testing.T, n *coNode) {
			// The launcher's pod is deleted: nothing is left to
			// virt-handler there, or the kubelet could not remove its
			// directory.
			n.gone, n.deleted = append(n.gone, n.launcher), true
			n.launcherPod.stop()
			n.podsGone = append(n.podsGone, n.launcher)
			n.hpmountSync(t, "sync")
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
				if err != nil {
					t.Errorf("KubeVirt's sync %d after the restart: %v", i, err)
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
