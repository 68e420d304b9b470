// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import (
	"errors"
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/mountinfo"
	"github.com/hpmount/hpmount/outcome"
)

// TestAttachUndoesABindThatLandedOnAnother is the race README "Running
// beside virt-handler's own mounter" names: another mounter binds disk.img
// from the publish mount onto the target after the agent's last look and
// before its move_mount. The agent's bind then lands on that bind, which
// shares the publish mount's peer group, and propagates onto disk.img
// inside the publish. The agent must see it right after move_mount (its
// mount's parent is not the directory's mount), undo it (the unmount
// propagates to the copy), and adopt the other mounter's bind in the same
// call: ErrLandedOnAnother stays inside it.
func TestAttachUndoesABindThatLandedOnAnother(t *testing.T) {
	if err := mountinfo.CheckStatmount(); err != nil {
		t.Skipf("needs statmount(2) to see where a bind landed: %v", err)
	}
	for _, tc := range []struct {
		name   string
		attach func(n *node) (outcome.Result, error)
		target string
		bind   func(t *testing.T, n *node, target string)
	}{
		{"file", func(n *node) (outcome.Result, error) {
			return n.a.Attach(hostTable(t), hpVolDir, launchDir, "v.img")
		}, "v.img", func(t *testing.T, n *node, target string) {
			must(t, unix.Mount(n.path(hpVolDir, "disk.img"), target, "", unix.MS_BIND, ""))
		}},
		{"directory", func(n *node) (outcome.Result, error) {
			return n.a.AttachDir(hostTable(t), hpVolDir, launchDir, "dump")
		}, "dump", func(t *testing.T, n *node, target string) {
			must(t, unix.Mount(n.path(hpVolDir), target, "", unix.MS_BIND, ""))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, "ext4")
			target := n.path(launchDir, tc.target)
			publish := n.path(hpVolDir)
			if tc.name == "file" {
				publish = n.path(hpVolDir, "disk.img")
			}
			if m := hostTable(t).Containing(n.path(hpVolDir)); m.Shared == 0 {
				t.Fatalf("the publish mount %+v is not shared: the race needs a peer group", m)
			}
			raced := false
			n.a.BeforeChange = func(step string) {
				if step == "bind" && !raced {
					raced = true
					tc.bind(t, n, target)
				}
			}
			t.Cleanup(func() {
				for unix.Unmount(target, unix.MNT_DETACH) == nil {
				}
			})
			res, err := tc.attach(n)
			if !raced {
				t.Fatal("the other mounter's bind was never made")
			}
			if err != nil || res != outcome.Unchanged {
				t.Errorf("attach that raced: %s, %v; want the other mounter's bind adopted", res, err)
			}
			tbl := hostTable(t)
			if stack := tbl.At(target); len(stack) != 1 {
				t.Errorf("%d mounts on the target after the race, want the other mounter's one", len(stack))
			}
			if copies := tbl.At(publish); len(copies) != 0 && (tc.name == "file" || len(copies) != 1) {
				t.Errorf("%d mounts on %q inside the publish: the bind propagated there and stayed", len(copies), publish)
			}
			n.a.BeforeChange = nil
			res, err = tc.attach(n)
			if err != nil || res == outcome.Mounted {
				t.Errorf("the next pass: %s, %v; want the other mounter's bind adopted", res, err)
			}
			if _, err := os.Lstat(target); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// TestMountAppearedOnTheTarget holds the checks another mounter's bind
// made between the agent's look and its own bind meets: the target opened
// for the bind, and a directory target reopened to be read, must still be
// on the launcher directory's mount, or the agent binds nothing and reads
// nothing (ErrTargetChanged). Without the second, a claim bound on an
// empty directory target was read as tenant content and refused.
func TestMountAppearedOnTheTarget(t *testing.T) {
	root, claim := t.TempDir(), t.TempDir()
	must(t, os.WriteFile(claim+"/content", []byte("tenant data"), 0o644))
	must(t, os.Mkdir(root+"/dump", 0o750))
	must(t, os.WriteFile(root+"/v.img", nil, 0o644))
	dir, err := os.Open(root)
	must(t, err)
	defer dir.Close()
	dirID, err := isolation.MountID(dir)
	must(t, err)

	empty, err := dirEmpty(dir, dirID, "dump")
	if err != nil || !empty {
		t.Fatalf("unmounted empty target: empty %v, %v; want true, nil", empty, err)
	}
	must(t, unix.Mount(claim, root+"/dump", "", unix.MS_BIND, ""))
	defer unix.Unmount(root+"/dump", unix.MNT_DETACH)
	if _, err := dirEmpty(dir, dirID, "dump"); !errors.Is(err, ErrTargetChanged) {
		t.Errorf("directory target with a claim bound on it: %v, want ErrTargetChanged", err)
	}

	tf, err := os.OpenFile(root+"/v.img", unix.O_PATH, 0)
	must(t, err)
	defer tf.Close()
	if err := onDirMount(tf, dirID); err != nil {
		t.Errorf("unmounted file target: %v", err)
	}
	must(t, unix.Mount(claim+"/content", root+"/v.img", "", unix.MS_BIND, ""))
	defer unix.Unmount(root+"/v.img", unix.MNT_DETACH)
	mounted, err := os.OpenFile(root+"/v.img", unix.O_PATH, 0)
	must(t, err)
	defer mounted.Close()
	if err := onDirMount(mounted, dirID); !errors.Is(err, ErrTargetChanged) {
		t.Errorf("file target with a bind on it: %v, want ErrTargetChanged", err)
	}
}

// TestDetachWhileAnotherUnmounts is the race the coexistence matrix found
// at a migration's end: virt-handler unmounts the target between the
// agent's look and its umount2, which then fails with EINVAL. The agent
// must look again and finish the detach, not report the vanished mount as
// an error. With a stack, the other mounter's unmount of the top makes the
// agent's remove the next mount, and the race repeats lower down.
func TestDetachWhileAnotherUnmounts(t *testing.T) {
	for _, stacked := range []int{1, 3} {
		t.Run(fmt.Sprintf("stacked=%d", stacked), func(t *testing.T) {
			n := newNode(t, "ext4")
			res, err := n.a.Attach(hostTable(t), hpVolDir, launchDir, "v.img")
			if err != nil || res != outcome.Mounted {
				t.Fatalf("attach: %s, %v", res, err)
			}
			target := n.path(launchDir, "v.img")
			for i := 1; i < stacked; i++ {
				must(t, unix.Mount(n.path(hpVolDir, "disk.img"), target, "", unix.MS_BIND, ""))
			}
			raced := 0
			n.a.BeforeChange = func(step string) {
				if step == "unmount" {
					raced++
					must(t, unix.Unmount(target, 0))
				}
			}
			res, err = n.a.Detach(hostTable(t), launchDir, "v.img")
			n.a.BeforeChange = nil
			if raced == 0 {
				t.Fatal("the other mounter never unmounted")
			}
			if err != nil || res != outcome.Removed {
				t.Errorf("detach that raced: %s, %v; want Removed", res, err)
			}
			if s := hostTable(t).At(target); len(s) != 0 {
				t.Errorf("%d mounts left on %q", len(s), target)
			}
			if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
				t.Errorf("target %q after detach: %v, want it removed", target, err)
			}
		})
	}
}

// TestAttachTargetCreatedMeanwhile is the race the peer matrix met:
// virt-handler's mounter creates the target between the agent's look and
// its create, and may bind the volume onto it at once. The create's EEXIST
// is no error: the agent looks again and binds onto the empty target, or
// adopts the peer's bind.
func TestAttachTargetCreatedMeanwhile(t *testing.T) {
	for _, tc := range []struct {
		name, step string
		bind       bool
		want       outcome.Result
	}{
		{"file", "create target", false, outcome.Mounted},
		{"file with the peer's bind", "create target", true, outcome.Unchanged},
		{"directory", "create target directory", false, outcome.Mounted},
		{"directory with the peer's bind", "create target directory", true, outcome.Unchanged},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, "ext4")
			dirMode := tc.step == "create target directory"
			target, source := n.path(launchDir, "v.img"), n.path(hpVolDir, "disk.img")
			attach := func() (outcome.Result, error) { return n.a.Attach(hostTable(t), hpVolDir, launchDir, "v.img") }
			if dirMode {
				target, source = n.path(launchDir, "dump"), n.path(hpVolDir)
				attach = func() (outcome.Result, error) { return n.a.AttachDir(hostTable(t), hpVolDir, launchDir, "dump") }
			}
			t.Cleanup(func() {
				for unix.Unmount(target, unix.MNT_DETACH) == nil {
				}
			})
			raced := false
			n.a.BeforeChange = func(step string) {
				if step != tc.step || raced {
					return
				}
				raced = true
				if dirMode {
					must(t, os.Mkdir(target, 0o750))
				} else {
					must(t, os.WriteFile(target, nil, 0o644))
				}
				if tc.bind {
					must(t, unix.Mount(source, target, "", unix.MS_BIND, ""))
				}
			}
			res, err := attach()
			if !raced {
				t.Fatal("the peer never created the target")
			}
			if err != nil || res != tc.want {
				t.Fatalf("attach: %s, %v; want %s", res, err, tc.want)
			}
			if stack := hostTable(t).At(target); len(stack) != 1 {
				t.Fatalf("%d mounts on %q, want 1", len(stack), target)
			}
		})
	}
}
