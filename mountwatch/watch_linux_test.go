// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mountwatch

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubelet"
)

func TestMain(m *testing.M) { testutil.RunInPrivateMountNamespace(m) }

// node is a kubelet root on a tmpfs of its own in the test's private
// mount namespace, which stands for the host's.
type node struct {
	t    testing.TB
	root kubelet.Root
}

func newNode(t testing.TB) *node {
	testutil.RequiresRoot(t)
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	must(t, unix.Mount("kubelet", dir, "tmpfs", 0, "size=1m"))
	t.Cleanup(func() { _ = unix.Unmount(dir, unix.MNT_DETACH) })
	return &node{t: t, root: kubelet.Root{Path: dir, Configured: dir}}
}

// file makes a file at rel beneath the root and returns its path.
func (n *node) file(rel string) string {
	p := n.root.Abs(rel)
	must(n.t, os.MkdirAll(filepath.Dir(p), 0o755))
	must(n.t, os.WriteFile(p, nil, 0o644))
	return p
}

// bind binds a fresh file onto rel (made if missing) and returns the
// target.
func (n *node) bind(rel string) string {
	target := n.file(rel)
	must(n.t, unix.Mount(n.file("src/"+filepath.Base(rel)), target, "", unix.MS_BIND, ""))
	return target
}

func must(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// testHost is the test's private mount namespace, standing for the
// host's.
func testHost() isolation.Host { return isolation.Host{Proc: "/proc", PID: os.Getpid()} }

func open(t *testing.T, n *node) *Watcher {
	w, err := Open(testHost(), n.root)
	must(t, err)
	t.Cleanup(func() { _ = w.Close() })
	return w
}

// next waits for the watcher's next change; the deadline only keeps a
// broken watcher from hanging the test.
func next(t *testing.T, w *Watcher) Change {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	c, err := w.Next(ctx)
	must(t, err)
	return c
}

func hotplug(uid, name string) string {
	return filepath.Join(kubelet.HotplugDisksDir(uid), name)
}

// TestWatcherReportsLaunchers: an unmount of a target mounted before the
// watcher started (known from the seed), a new bind, and a mount stacked
// on it each name their launcher; mounts outside any launcher's
// hotplug-disks (an attachment pod's publish, the kubelet root) name
// none.
func TestWatcherReportsLaunchers(t *testing.T) {
	n := newNode(t)
	seeded := n.bind(hotplug("launcher-a", "disk0.img"))
	w := open(t, n)
	if w.Tracked() != 1 {
		t.Fatalf("seeded %d mounts, want the one on %q", w.Tracked(), seeded)
	}
	// Each step first changes a mount no launcher's hotplug-disks has:
	// were it reported, the change would name launcher-b or hold two.
	outside := n.bind("pods/launcher-b/volumes/kubernetes.io~csi/pv/mount/disk.img")
	for _, step := range []struct {
		name   string
		change func()
		want   string
	}{
		{"foreign unmount of a seeded target", func() { must(t, unix.Unmount(seeded, 0)) }, "launcher-a"},
		{"new target", func() { n.bind(hotplug("launcher-c", "disk1.img")) }, "launcher-c"},
		{"mount stacked on a target", func() { n.bind(hotplug("launcher-c", "disk1.img")) }, "launcher-c"},
		{"unmount of the stacked mount", func() { must(t, unix.Unmount(n.root.Abs(hotplug("launcher-c", "disk1.img")), 0)) }, "launcher-c"},
	} {
		t.Run(step.name, func(t *testing.T) {
			must(t, unix.Unmount(outside, 0))
			step.change()
			outside = n.bind("pods/launcher-b/volumes/kubernetes.io~csi/pv/mount/disk.img")
			if c := next(t, w); !reflect.DeepEqual(c, Change{Launchers: []string{step.want}}) {
				t.Errorf("change %+v, want %s alone", c, step.want)
			}
		})
	}
	if w.Tracked() != 1 {
		t.Errorf("tracking %d mounts, want launcher-c's one left", w.Tracked())
	}
}

// TestWatcherMove: a mount moved out of a launcher's hotplug-disks is a
// detach there and an attach elsewhere, in one event.
func TestWatcherMove(t *testing.T) {
	n := newNode(t)
	target := n.bind(hotplug("launcher-a", "disk0.img"))
	w := open(t, n)
	dst := n.file("elsewhere/disk0.img")
	must(t, unix.Mount(target, dst, "", unix.MS_MOVE, ""))
	if c := next(t, w); !reflect.DeepEqual(c, Change{Launchers: []string{"launcher-a"}}) {
		t.Errorf("change %+v, want launcher-a alone", c)
	}
	if w.Tracked() != 0 {
		t.Errorf("tracking %d mounts after the move, want none", w.Tracked())
	}
}

// TestNextEndsWithContext: a watcher with nothing to report returns when
// its context ends, and reports again under the next one.
func TestNextEndsWithContext(t *testing.T) {
	n := newNode(t)
	w := open(t, n)
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	if _, err := w.Next(ctx); err != context.Canceled {
		t.Errorf("Next on a cancelled context: %v", err)
	}
	n.bind(hotplug("launcher-a", "disk0.img"))
	if c := next(t, w); !reflect.DeepEqual(c, Change{Launchers: []string{"launcher-a"}}) {
		t.Errorf("change after a cancelled Next %+v, want launcher-a", c)
	}
}
