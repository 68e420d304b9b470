// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/internal/testutil"
)

// hangFUSE mounts, over dir, a FUSE filesystem whose server never answers:
// its /dev/fuse descriptor is held and never read. Every lookup beneath
// dir then waits in the kernel for an answer, as on a hard-mounted NFS
// volume whose server is gone or behind a hung FUSE daemon. When t ends
// the descriptor is closed, which aborts the connection: the waits end
// with ENOTCONN, so threads diag abandoned return, and the mount goes.
func hangFUSE(t *testing.T, dir string) {
	t.Helper()
	dev, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		t.Fatalf("open /dev/fuse: %v", err)
	}
	opts := fmt.Sprintf("fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other", dev.Fd())
	if err := unix.Mount("hung", dir, "fuse", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		dev.Close()
		t.Fatalf("mount a FUSE filesystem on %q: %v", dir, err)
	}
	t.Cleanup(func() {
		dev.Close()
		_ = unix.Unmount(dir, unix.MNT_DETACH)
	})
}

// TestDiagReportsAHungVolumeStuck: one volume's published source hangs
// (a FUSE filesystem that never answers, mounted over the attachment pod's
// publish directory after the bind was made); another volume sits on an
// xfs frozen with FIFREEZE. diag returns, marks the hung volume stuck,
// and reports every other volume as it is, the hung one's sibling in the
// same VMI included.
//
// A frozen filesystem blocks writes only (a writer waits in
// percpu_rwsem_wait, uninterruptibly); stat, open for reading, statfs,
// readdir and the xfs geometry ioctl return at once, and diag only reads.
// So the frozen volume must come back with its usual verdict, not stuck,
// and the blocking object is the FUSE mount: the open of disk.img in the
// source check (engine.View.Image, mount.Attacher.CheckImage) waits on its
// lookup forever.
func TestDiagReportsAHungVolumeStuck(t *testing.T) {
	e := newEnv(t)
	e.must(e.ctl.EnsureNamespace(e.ctx, "default"))

	hung := e.addVM("hung", fsVol("fine"), fsVol("hung"))
	e.attachFS(hung, "fine", "pv-fine", e.disk("fine", "ext4", 64<<20), true)
	e.attachFS(hung, "hung", "pv-hung", e.disk("hung", "ext4", 64<<20), true)
	frozen := e.addVM("frozen", fsVol("cold"))
	e.attachFS(frozen, "cold", "pv-cold", e.disk("cold", "xfs", testutil.MinXFSSize), true)

	coldDir := e.node.CSIMountDir(string(frozen.attach), "pv-cold")
	testutil.Run(t, "fsfreeze", "--freeze", coldDir)
	t.Cleanup(func() { testutil.Run(t, "fsfreeze", "--unfreeze", coldDir) })
	hangFUSE(t, e.node.CSIMountDir(string(hung.attach), "pv-hung"))

	// The default deadline: a shorter one could abandon a healthy look
	// on a loaded machine.
	o := e.opts()
	type result struct {
		rep *Report
		err error
	}
	done := make(chan result, 1)
	go func() {
		rep, err := Run(e.ctx, o, e.c)
		done <- result{rep, err}
	}()
	var r result
	select {
	case r = <-done:
	case <-time.After(time.Minute):
		// Not a budget: with one abandoned look of 5 s this only catches
		// a diag that waits on the hung mount for good.
		t.Fatal("diag did not return within a minute of a volume hanging")
	}
	e.must(r.err)
	vols := map[string]Volume{}
	for _, v := range r.rep.Volumes {
		vols[v.Volume] = v
	}
	for name, want := range map[string]Verdict{"hung": Stuck, "fine": OK, "cold": OK} {
		if v := vols[name]; v.Verdict != want {
			t.Errorf("volume %s: verdict %q, want %q (detail %q)", name, v.Verdict, want, v.Detail)
		}
	}
	h := vols["hung"]
	if !strings.Contains(h.Detail, "after "+DefaultCallTimeout.String()) || !strings.Contains(h.Hint, "--call-timeout") {
		t.Errorf("stuck volume: detail %q hint %q: want the deadline in the detail and the flag in the hint", h.Detail, h.Hint)
	}
	// Which look waits first (the walk onto the FUSE root, or the open of
	// disk.img) is the kernel's business; either names the hung source.
	if !strings.Contains(h.Detail, "pv-hung") {
		t.Errorf("stuck volume: detail %q does not name the look at pv-hung that got stuck", h.Detail)
	}
	t.Logf("stuck volume: %s", h.Detail)
	if r.rep.Problems != 1 || ExitCode(r.rep, nil) != ExitProblems {
		t.Errorf("problems %d exit %d: want the stuck volume alone", r.rep.Problems, ExitCode(r.rep, nil))
	}
}
