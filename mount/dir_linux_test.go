// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/outcome"
)

// TestAttachDirLifecycle binds a PVC's mount root as a directory into a
// running launcher: writes land on the PVC, a submount inside the PVC does
// not follow, a second attach changes nothing, and detach removes the
// empty directory and leaves the PVC's files alone.
func TestAttachDirLifecycle(t *testing.T) {
	for _, mode := range []struct {
		name     string
		fallback bool
	}{{"open_tree", false}, {"mount(2)", true}} {
		t.Run(mode.name, func(t *testing.T) {
			withFallback(t, mode.fallback)
			n := newNode(t, "ext4")
			// A mount inside the PVC (a tenant's nested volume, say) must
			// not be carried into the launcher: the bind is not recursive.
			must(t, os.Mkdir(n.path(hpVolDir, "sub"), 0o755))
			testutil.NewFilesystem(t, "ext4", 32<<20, n.path(hpVolDir, "sub"))
			must(t, os.WriteFile(n.path(hpVolDir, "sub", "secret"), []byte("x"), 0o600))
			l := testutil.StartLauncher(t)
			target := n.path(launchDir, "dump")

			res, err := n.a.AttachDir(hostTable(t), hpVolDir, launchDir, "dump")
			if err != nil || res != outcome.Mounted {
				t.Fatalf("attach: %v %v, want Mounted", res, err)
			}
			id := n.wantSingleDirBind(t, "dump")
			res, err = n.a.AttachDir(hostTable(t), hpVolDir, launchDir, "dump")
			if err != nil || res != outcome.Unchanged || n.wantSingleDirBind(t, "dump") != id {
				t.Fatalf("attach again: %v %v, want Unchanged on mount %d", res, err, id)
			}

			l.Exec(t, fmt.Sprintf("printf dumped > %q/memory.dump", target))
			if got, err := os.ReadFile(n.path(hpVolDir, "memory.dump")); err != nil || string(got) != "dumped" {
				t.Fatalf("PVC holds %q (%v), want what the launcher wrote", got, err)
			}
			if out := l.Exec(t, fmt.Sprintf("ls -A %q/sub", target)); out != "" {
				t.Fatalf("launcher sees %q in the PVC's submount directory, want nothing", out)
			}
			if c := strings.Count(l.MountInfo(t), " "+target+"/sub "); c != 0 {
				t.Fatalf("launcher sees the PVC's submount under %q", target)
			}
			if !mode.fallback {
				// Made private before attaching: a mount made inside the
				// PVC later does not follow either.
				must(t, os.Mkdir(n.path(hpVolDir, "later"), 0o755))
				must(t, unix.Mount("tmpfs", n.path(hpVolDir, "later"), "tmpfs", 0, ""))
				t.Cleanup(func() { unix.Unmount(n.path(hpVolDir, "later"), unix.MNT_DETACH) })
				if c := strings.Count(l.MountInfo(t), " "+target+"/later "); c != 0 {
					t.Fatalf("a later submount of the PVC reached the launcher under %q", target)
				}
			}

			obs, err := n.a.ObserveDirs(hostTable(t), launchDir, listDirs)
			must(t, err)
			if len(obs) != 1 || obs[0].Name != "dump" || !obs[0].Mounted || obs[0].Depth != 1 || obs[0].Root != "/" || obs[0].MountID != id {
				t.Fatalf("observe: %+v, want dump mounted once at / (mount %d)", obs, id)
			}
			if files, err := n.a.Observe(hostTable(t), launchDir, listFiles); err != nil || len(files) != 0 {
				t.Fatalf("file observe lists the directory: %+v %v", files, err)
			}

			res, err = n.a.DetachDir(hostTable(t), launchDir, "dump")
			if err != nil || res != outcome.Removed {
				t.Fatalf("detach: %v %v, want Removed", res, err)
			}
			if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
				t.Fatalf("target %q still there: %v", target, err)
			}
			if _, err := os.Stat(n.path(hpVolDir, "memory.dump")); err != nil {
				t.Fatalf("the dump left the PVC with the detach: %v", err)
			}
			if res, err := n.a.DetachDir(hostTable(t), launchDir, "dump"); err != nil || res != outcome.Unchanged {
				t.Fatalf("detach again: %v %v, want Unchanged", res, err)
			}
		})
	}
}

// wantSingleDirBind checks one mount of the PVC's root on the directory
// target, owned by QEMU, and returns its id.
func (n *node) wantSingleDirBind(t *testing.T, name string) int {
	t.Helper()
	target := n.path(launchDir, name)
	stack := hostTable(t).At(target)
	if len(stack) != 1 {
		t.Fatalf("%d mounts on %q, want 1", len(stack), target)
	}
	dev := n.loop.Dev(t)
	if m := stack[0]; m.Root != "/" || m.Major != unix.Major(dev) || m.Minor != unix.Minor(dev) {
		t.Fatalf("mount on %q is %s[%s], want the PVC's root", target, m.Dev(), m.Root)
	}
	var st unix.Stat_t
	must(t, unix.Stat(target, &st))
	if st.Uid != DefaultQEMUID || st.Gid != DefaultQEMUID {
		t.Fatalf("%q owned by %d:%d, want 107:107", target, st.Uid, st.Gid)
	}
	return stack[0].ID
}

// TestAttachDirRepairsAndRefuses starts from what a crash or a tenant can
// leave at the target name.
func TestAttachDirRepairsAndRefuses(t *testing.T) {
	tests := []struct {
		name    string
		plant   func(t *testing.T, n *node, target string)
		want    outcome.Result
		refused bool
	}{
		{"empty root-owned directory from a crash is used", func(t *testing.T, n *node, target string) {
			must(t, os.Mkdir(target, 0o750))
		}, outcome.Mounted, false},
		{"stacked binds are peeled to one", func(t *testing.T, n *node, target string) {
			must(t, os.Mkdir(target, 0o750))
			must(t, unix.Mount(n.base, target, "", unix.MS_BIND, ""))
			must(t, unix.Mount(n.base, target, "", unix.MS_BIND, ""))
		}, outcome.Replaced, false},
		{"a bind of another directory is replaced", func(t *testing.T, n *node, target string) {
			must(t, os.Mkdir(target, 0o750))
			must(t, unix.Mount(n.base, target, "", unix.MS_BIND, ""))
		}, outcome.Replaced, false},
		{"symlink to the host's root is refused", func(t *testing.T, n *node, target string) {
			must(t, os.Symlink("/", target))
		}, "", true},
		{"regular file is refused", func(t *testing.T, n *node, target string) {
			must(t, os.WriteFile(target, []byte("x"), 0o644))
		}, "", true},
		{"directory with the launcher's files is refused", func(t *testing.T, n *node, target string) {
			must(t, os.Mkdir(target, 0o750))
			must(t, os.WriteFile(target+"/mine", nil, 0o644))
		}, "", true},
		{"directory owned by the launcher's user is refused", func(t *testing.T, n *node, target string) {
			must(t, os.Mkdir(target, 0o750))
			must(t, os.Chown(target, 107, 107))
		}, "", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := newNode(t, "ext4")
			target := n.path(launchDir, "dump")
			tt.plant(t, n, target)
			before := len(hostTable(t).At(target))
			// diag's look at the target judges it as AttachDir does.
			if err := n.a.CheckDirTarget(hostTable(t), launchDir, "dump"); errors.Is(err, isolation.ErrUnsafePath) != tt.refused ||
				!tt.refused && err != nil {
				t.Errorf("check: %v, want refused %v", err, tt.refused)
			}
			res, err := n.a.AttachDir(hostTable(t), hpVolDir, launchDir, "dump")
			if tt.refused {
				if !errors.Is(err, isolation.ErrUnsafePath) || res != "" {
					t.Fatalf("attach: %v %v, want a refusal", res, err)
				}
				if after := len(hostTable(t).At(target)); after != before {
					t.Fatalf("refusal changed the mounts on %q: %d, was %d", target, after, before)
				}
				return
			}
			if err != nil || res != tt.want {
				t.Fatalf("attach: %v %v, want %s", res, err, tt.want)
			}
			n.wantSingleDirBind(t, "dump")
		})
	}
}

// TestAttachDirRefusesSymlinkedSource refuses a published volume directory
// reached through a symlink.
func TestAttachDirRefusesSymlinkedSource(t *testing.T) {
	n := newNode(t, "ext4")
	must(t, os.Symlink(n.path(hpVolDir), n.path("pods", "0a1b-hp", "link")))
	_, err := n.a.AttachDir(hostTable(t), "pods/0a1b-hp/link", launchDir, "dump")
	if !errors.Is(err, isolation.ErrUnsafePath) {
		t.Fatalf("attach through a symlinked source: %v, want a refusal", err)
	}
	if _, err := os.Lstat(n.path(launchDir, "dump")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("a refused attach left a target: %v", err)
	}
}

// TestDetachDirKeepsContent: after the unmount, a directory that is not
// empty is left where it is.
func TestDetachDirKeepsContent(t *testing.T) {
	n := newNode(t, "ext4")
	target := n.path(launchDir, "dump")
	if _, err := n.a.AttachDir(hostTable(t), hpVolDir, launchDir, "dump"); err != nil {
		t.Fatal(err)
	}
	// A file in the directory under the mount, written through a
	// non-recursive bind of hotplug-disks that shows the directory itself.
	view := n.base + "/view"
	must(t, os.Mkdir(view, 0o755))
	must(t, unix.Mount(n.path(launchDir), view, "", unix.MS_BIND, ""))
	must(t, os.WriteFile(view+"/dump/under", nil, 0o644))
	must(t, unix.Unmount(view, 0))
	res, err := n.a.DetachDir(hostTable(t), launchDir, "dump")
	if err != nil || res != outcome.Removed {
		t.Fatalf("detach: %v %v, want Removed", res, err)
	}
	if s := hostTable(t).At(target); len(s) != 0 {
		t.Fatalf("%d mounts left on %q", len(s), target)
	}
	if _, err := os.Stat(target + "/under"); err != nil {
		t.Fatalf("the directory with content went: %v", err)
	}
	if obs, err := n.a.ObserveDirs(hostTable(t), launchDir, listDirs); err != nil || len(obs) != 0 {
		t.Fatalf("observe lists the launcher's own directory: %+v %v", obs, err)
	}
}

// TestDirTargetChangedMidLook: virt-handler changes a target directory
// between the agent's open of it and the read of its entries. Removed (its
// cleanup at the end of a migration), the target is gone, not an error:
// the detach has nothing to do and the observe lists nothing. Bound (its
// bind of the same claim), the read sees the claim through another mount
// (ErrTargetChanged); the target is looked at once more and found
// mounted: the observe lists it, the attach adopts it.
func TestDirTargetChangedMidLook(t *testing.T) {
	observe := func(mounted int) func(n *node) (string, error) {
		return func(n *node) (string, error) {
			obs, err := n.a.ObserveDirs(hostTable(t), launchDir, listDirs)
			if err == nil && (len(obs) != mounted || mounted > 0 && !obs[0].Mounted) {
				return fmt.Sprintf("observed %+v", obs), nil
			}
			return "", err
		}
	}
	result := func(call func(n *node) (outcome.Result, error), want outcome.Result) func(n *node) (string, error) {
		return func(n *node) (string, error) {
			res, err := call(n)
			if err == nil && res != want {
				return fmt.Sprintf("%v, want %v", res, want), nil
			}
			return "", err
		}
	}
	detach := func(n *node) (outcome.Result, error) { return n.a.DetachDir(hostTable(t), launchDir, "dump") }
	attach := func(n *node) (outcome.Result, error) { return n.a.AttachDir(hostTable(t), hpVolDir, launchDir, "dump") }
	for _, tc := range []struct {
		name string
		bind bool
		call func(n *node) (string, error)
	}{
		{"removed, detach", false, result(detach, outcome.Unchanged)},
		{"removed, observe", false, observe(0)},
		{"bound, observe", true, observe(1)},
		{"bound, attach", true, result(attach, outcome.Unchanged)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNode(t, "ext4")
			target := n.path(launchDir, "dump")
			must(t, os.Mkdir(target, 0o750))
			t.Cleanup(func() {
				for unix.Unmount(target, unix.MNT_DETACH) == nil {
				}
			})
			raced := false
			afterDirTargetOpen = func(string) {
				switch {
				case raced:
				case tc.bind:
					must(t, unix.Mount(n.path(hpVolDir), target, "", unix.MS_BIND, ""))
				default:
					must(t, os.Remove(target))
				}
				raced = true
			}
			t.Cleanup(func() { afterDirTargetOpen = nil })
			if wrong, err := tc.call(n); err != nil || wrong != "" || !raced {
				t.Fatalf("%s %v (raced %v)", wrong, err, raced)
			}
		})
	}
}

// TestAttachDirLeavesThePeerGroup: a directory volume's bind leaves the
// peer group of the kubelet's (shared) volume mount, on every kernel path:
// mount_setattr (5.12+), open_tree without it (5.2 to 5.11: ENOSYS, then
// mount(2) on the detached clone) and mount(2) alone. In the group, a
// mount made inside the PVC later would follow the bind into the
// launcher. With mount_setattr failing ENOSYS the bind of old stayed in
// the group.
func TestAttachDirLeavesThePeerGroup(t *testing.T) {
	for _, tc := range []struct {
		name                string
		fallback, noSetattr bool
	}{
		{"mount_setattr", false, false},
		{"open_tree without mount_setattr", false, true},
		{"mount(2)", true, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			withFallback(t, tc.fallback)
			if tc.noSetattr {
				calls := 0
				mountSetattr = func(int, string, uint, *unix.MountAttr) error { calls++; return unix.ENOSYS }
				t.Cleanup(func() {
					mountSetattr = unix.MountSetattr
					if calls == 0 {
						t.Error("mount_setattr was never asked")
					}
				})
			}
			n := newNode(t, "ext4")
			vol := hostTable(t).At(n.path(hpVolDir))
			if len(vol) != 1 || vol[0].Shared == 0 {
				t.Fatalf("the PVC's mount is %+v, want one shared mount", vol)
			}
			if res, err := n.a.AttachDir(hostTable(t), hpVolDir, launchDir, "dump"); err != nil || res != outcome.Mounted {
				t.Fatalf("attach: %v %v, want Mounted", res, err)
			}
			target := n.path(launchDir, "dump")
			bind := hostTable(t).At(target)
			if len(bind) != 1 {
				t.Fatalf("%d mounts on %q, want 1", len(bind), target)
			}
			if b := bind[0]; b.Shared == vol[0].Shared || b.Master == vol[0].Shared {
				t.Fatalf("the bind on %q is shared:%d master:%d, in or under the PVC mount's peer group %d", target, b.Shared, b.Master, vol[0].Shared)
			}
			must(t, os.Mkdir(n.path(hpVolDir, "later"), 0o755))
			must(t, unix.Mount("tmpfs", n.path(hpVolDir, "later"), "tmpfs", 0, ""))
			t.Cleanup(func() { _ = unix.Unmount(n.path(hpVolDir, "later"), unix.MNT_DETACH) })
			if got := hostTable(t).At(target + "/later"); len(got) != 0 {
				t.Fatalf("a mount made inside the PVC later followed the bind to %q", target)
			}
			if res, err := n.a.DetachDir(hostTable(t), launchDir, "dump"); err != nil || res != outcome.Removed {
				t.Fatalf("detach: %v %v, want Removed", res, err)
			}
		})
	}
}
