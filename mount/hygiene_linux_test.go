// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/outcome"
)

// stagingDir is where the test's CSI driver "stages" the volume: the publish
// mount is a bind of it, so the two are peers, as on a real node.
const stagingDir = "plugins/kubernetes.io/csi/pv/pvc-a/globalmount"

// TestBindDoesNotJoinSourcePeerGroup: a mount stacked on <vol>.img (virt-
// handler racing the agent, say) must not propagate onto disk.img inside
// the CSI publish and staging mounts, where it would make NodeUnpublish and
// NodeUnstage fail with "target is busy". The launcher's slave view must
// still receive the bind.
func TestBindDoesNotJoinSourcePeerGroup(t *testing.T) {
	for _, mode := range []struct {
		name     string
		fallback bool
	}{{"open_tree", false}, {"mount(2)", true}} {
		t.Run(mode.name, func(t *testing.T) {
			withFallback(t, mode.fallback)
			n := newNode(t, "ext4")
			staging := n.path(stagingDir)
			must(t, os.MkdirAll(staging, 0o750))
			must(t, unix.Mount(n.path(hpVolDir), staging, "", unix.MS_BIND, ""))
			t.Cleanup(func() { _ = unix.Unmount(staging, unix.MNT_DETACH) })
			l := testutil.StartLauncher(t)

			res, err := n.a.Attach(hostTable(t), hpVolDir, launchDir, "vol-a.img")
			if err != nil || res != outcome.Mounted {
				t.Fatalf("attach: %v %v, want Mounted", res, err)
			}
			id := n.wantSingleBind(t, "vol-a")
			tbl := hostTable(t)
			bind, src := tbl.ByID(id), tbl.Containing(n.path(hpVolDir, "disk.img"))
			if src == nil || src.Shared == 0 {
				t.Fatalf("the test's publish mount is not shared: %+v", src)
			}
			if bind.Shared == src.Shared {
				t.Fatalf("bind %d is in the publish mount's peer group %d", id, src.Shared)
			}
			target := n.path(launchDir, "vol-a.img")
			if c := strings.Count(l.MountInfo(t), " "+target+" "); c != 1 {
				t.Fatalf("launcher sees %d mounts on %q, want 1", c, target)
			}

			// A stacked mount, as another mounter racing the agent would
			// make on the target.
			stack := filepath.Join(n.base, "stacked")
			must(t, os.WriteFile(stack, []byte("stacked"), 0o600))
			must(t, unix.Mount(stack, target, "", unix.MS_BIND, ""))
			tbl = hostTable(t)
			if len(tbl.At(target)) != 2 {
				t.Fatalf("stacking on %q: %d mounts, want 2", target, len(tbl.At(target)))
			}
			for _, dir := range []string{n.path(hpVolDir), staging} {
				img := filepath.Join(dir, "disk.img")
				if got := tbl.At(img); len(got) != 0 {
					t.Fatalf("the stacked mount reached the source %q: %d mounts there", img, len(got))
				}
			}
			must(t, unix.Unmount(target, unix.MNT_DETACH))

			// NodeUnpublish and NodeUnstage succeed with the launcher's bind
			// still in place: nothing is mounted inside them.
			for _, dir := range []string{n.path(hpVolDir), staging} {
				if err := unix.Unmount(dir, 0); err != nil {
					t.Fatalf("unmount %q with the bind in place: %v", dir, err)
				}
			}
			out := l.Exec(t, fmt.Sprintf("dd if=%q bs=1 count=1 2>/dev/null | wc -c", target))
			if strings.TrimSpace(out) != "1" {
				t.Fatalf("launcher cannot read %q after unpublish: %q", target, out)
			}
		})
	}
}
