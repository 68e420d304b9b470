// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/test/simnode"
)

// TestResizeAfterReplacement is the case the built-in mounter fails: a
// volume whose attachment pod was replaced is expanded. No pod publishes it
// any more, so no CSI NodeExpandVolume runs; the agent grows it through the
// launcher's bind mount, also across an agent restart.
func TestResizeAfterReplacement(t *testing.T) {
	e := newEnv(t, "--grow-filesystems", "--expand-disk-images")
	v := e.newVM("tenant-c", "grow")
	xfs := v.addVolume("xfsvol", "xfs", 320<<20)
	ext := v.addVolume("extvol", "ext4", 128<<20)
	blk := v.addVolume("blkvol", "", 64<<20)
	hp1 := v.newAttachmentPod(xfs, ext, blk)
	v.apply()
	v.waitMounted(xfs)
	v.waitMounted(ext)
	v.waitNode(blk)
	sums := map[string]string{}
	for _, vol := range []simnode.Volume{xfs, ext} {
		sums[vol.Name] = v.writeRandom(t, vol)
	}

	e.step("second hotplug replaces the attachment pod", func(t *testing.T) {
		later := v.addVolume("later", "ext4", 64<<20)
		v.replaceAttachmentPod(hp1, []simnode.Volume{xfs, ext}, later)
		v.apply()
		v.waitMounted(later)
		for _, vol := range []simnode.Volume{xfs, ext} {
			if _, err := os.Stat(e.node.CSIMountDir(string(hp1.UID), vol.PV)); !os.IsNotExist(err) {
				t.Fatalf("%s is still published: %v", vol.Name, err)
			}
		}
	})

	e.step("agent restarts while no pod publishes the volumes", func(t *testing.T) {
		e.agent.Cmd.Process.Signal(unix.SIGKILL)
		<-e.agent.Done()
		e.startAgent()
	})

	e.step("xfs grows online through the launcher's mount", func(t *testing.T) {
		before := v.launcherStatfs(t, xfs)
		if err := v.Disks["xfsvol"].Grow(480 << 20); err != nil {
			t.Fatal(err)
		}
		v.SetRequest("xfsvol", 480<<20)
		v.apply()
		// Wait for the growth itself: an earlier FilesystemExpanded of
		// xfsvol (its disk.img grown after the data was written) must not
		// pass for it.
		var after int64
		e.eventually("xfsvol grown in the launcher", 60*time.Second, func() error {
			if after = v.launcherStatfs(t, xfs); after <= before+100<<20 {
				return fmt.Errorf("launcher sees %d bytes, was %d: not grown", after, before)
			}
			return nil
		})
		e.waitEvent(v.NS, v.Name, "FilesystemExpanded", "xfsvol: filesystem xfs grew")
		for _, ev := range e.events(v.NS, v.Name) {
			if ev.Reason == "ShrinkIgnored" {
				t.Fatalf("growth was reported as a shrink: %s", ev.Message)
			}
		}
		if got := v.sumThroughLauncher(t, xfs); got != sums["xfsvol"] {
			t.Fatalf("data changed: %s, was %s", got, sums["xfsvol"])
		}
		if _, n := e.table().Top(v.Target(xfs)); n != 1 {
			t.Fatalf("%d mounts on the target", n)
		}
		v.assertDiskImageSize(t, xfs, 480<<20)
	})

	e.step("ext4 growth: EPERM without CAP_SYS_RESOURCE is reported, nothing lost", func(t *testing.T) {
		id := v.waitMounted(ext)
		before := v.launcherStatfs(t, ext)
		if err := v.Disks["extvol"].Grow(256 << 20); err != nil {
			t.Fatal(err)
		}
		v.SetCapacity("extvol", 256<<20)
		v.apply()
		if hasCapSysResource(t) {
			// A node with the capability (a real privileged DaemonSet)
			// grows ext4 like xfs.
			e.waitEvent(v.NS, v.Name, "FilesystemExpanded", "extvol")
			if after := v.launcherStatfs(t, ext); after <= before {
				t.Fatalf("ext4 not grown: %d, was %d", after, before)
			}
			return
		}
		ev := e.waitEvent(v.NS, v.Name, "FilesystemExpansionFailed", "extvol")
		if !strings.Contains(ev.Message, "CAP_SYS_RESOURCE") {
			t.Fatalf("event does not name the capability: %s", ev.Message)
		}
		if ev.Type != "Warning" {
			t.Fatalf("event type %s", ev.Type)
		}
		if got := v.waitMounted(ext); got != id {
			t.Fatalf("ext4 volume remounted: %d, was %d", got, id)
		}
		if after := v.launcherStatfs(t, ext); after != before {
			t.Fatalf("size changed %d -> %d", before, after)
		}
		if got := v.sumThroughLauncher(t, ext); got != sums["extvol"] {
			t.Fatalf("data changed")
		}
	})

	e.step("shrink is ignored with a warning", func(t *testing.T) {
		before := v.launcherStatfs(t, xfs)
		v.SetCapacity("xfsvol", 200<<20)
		v.apply()
		e.waitEvent(v.NS, v.Name, "ShrinkIgnored", "xfsvol")
		if after := v.launcherStatfs(t, xfs); after != before {
			t.Fatalf("size changed %d -> %d", before, after)
		}
	})

	e.step("block volume: growth is seen, a new device replaces the node", func(t *testing.T) {
		if err := v.Disks["blkvol"].Grow(96 << 20); err != nil {
			t.Fatal(err)
		}
		e.eventually("launcher sees 96 MiB", 30*time.Second, func() error {
			out, err := v.L.Exec("blockdev --getsize64 " + v.Target(blk))
			if err != nil {
				return err
			}
			if strings.TrimSpace(out) != strconv.Itoa(96<<20) {
				return fmt.Errorf("size %s", out)
			}
			return nil
		})
		// Re-published on another loop device (a new minor), as after a
		// detach and re-attach by the storage backend.
		moved, err := e.node.NewDisk("grow-blkvol-2", "", 96<<20)
		if err != nil {
			t.Fatal(err)
		}
		v.Disks["blkvol"] = moved
		pod := string(v.Attach["blkvol"])
		if err := e.node.UnpublishBlock(pod, blk.PV); err != nil {
			t.Fatal(err)
		}
		if err := e.node.PublishBlock(pod, blk.PV, moved); err != nil {
			t.Fatal(err)
		}
		_, minor, _ := moved.Rdev()
		e.eventually("node follows the new device", 30*time.Second, func() error {
			var st unix.Stat_t
			if err := unix.Stat(v.Target(blk), &st); err != nil {
				return err
			}
			if unix.Minor(st.Rdev) != minor {
				return fmt.Errorf("node is %d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev))
			}
			return nil
		})
		v.roundTrip(t, blk, "on-the-new-device")
	})

	e.step("sizes are exported", func(t *testing.T) {
		e.eventually("size gauges", 30*time.Second, func() error {
			text, err := e.agent.Scrape()
			if err != nil {
				return err
			}
			for _, want := range []string{
				`hpmount_volume_device_size_bytes{namespace="tenant-c",persistentvolumeclaim="grow-xfsvol",vmi="grow",volume="xfsvol"} 5.0331648e+08`,
				`hpmount_volume_device_size_bytes{namespace="tenant-c",persistentvolumeclaim="grow-blkvol",vmi="grow",volume="blkvol"} 1.00663296e+08`,
				`hpmount_filesystem_expansions_total{result="grown"} `,
				`hpmount_filesystem_expansions_total{result="failed"} `,
			} {
				if !strings.Contains(text, want) {
					return fmt.Errorf("no %q in scrape", want)
				}
			}
			return nil
		})
	})
}

// writeRandom fills 4 MiB of the image through the launcher and returns
// its checksum.
func (v *vm) writeRandom(t *testing.T, vol simnode.Volume) string {
	t.Helper()
	if _, err := v.L.Exec(fmt.Sprintf("head -c 4194304 /dev/urandom | dd of=%s bs=1M seek=2 conv=notrunc status=none && sync", v.Target(vol))); err != nil {
		t.Fatal(err)
	}
	return v.sumThroughLauncher(t, vol)
}

func (v *vm) sumThroughLauncher(t *testing.T, vol simnode.Volume) string {
	t.Helper()
	out, err := v.L.Exec(fmt.Sprintf("dd if=%s bs=1M skip=2 count=4 status=none | sha256sum", v.Target(vol)))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(out)[0]
}

// launcherStatfs is the filesystem size as the launcher sees it.
func (v *vm) launcherStatfs(t *testing.T, vol simnode.Volume) int64 {
	t.Helper()
	out, err := v.L.Exec("stat -f -c '%b %S' " + v.Target(vol))
	if err != nil {
		t.Fatal(err)
	}
	var blocks, size int64
	if _, err := fmt.Sscan(out, &blocks, &size); err != nil {
		t.Fatalf("stat -f output %q: %v", out, err)
	}
	return blocks * size
}

// assertDiskImageSize checks disk.img against KubeVirt's usable size for
// the capacity, computed from what the filesystem reports now.
func (v *vm) assertDiskImageSize(t *testing.T, vol simnode.Volume, capacity int64) {
	t.Helper()
	want, size := v.kubevirtImageSize(t, vol, capacity)
	if size != want || size%(1<<20) != 0 || size <= 32<<20 {
		t.Fatalf("disk.img is %d bytes, want %d (grown from 32 MiB, MiB-aligned)", size, want)
	}
}

func hasCapSysResource(t *testing.T) bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "CapBnd:"); ok {
			v, err := strconv.ParseUint(strings.TrimSpace(rest), 16, 64)
			return err == nil && v&(1<<unix.CAP_SYS_RESOURCE) != 0
		}
	}
	return false
}
