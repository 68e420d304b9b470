// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/test/simnode"
)

// Deadlines of the agent in TestFrozenGrowthWhileHotplugging: short enough
// that both growths are written off within the test, while their
// filesystems stay frozen.
const (
	frozenGrowTimeout = 5 * time.Second
	frozenStuckLimit  = 2 * time.Second
)

// The freeze ioctls of linux/fs.h, _IOWR('X', 119 and 120, int), which
// x/sys/unix does not define.
const (
	ioctlFIFREEZE = 0xc0045877
	ioctlFITHAW   = 0xc0045878
)

// TestFrozenGrowthWhileHotplugging is a Longhorn snapshot freezing two
// filesystems while their expansions are due (#19, defect 2). Two VMIs
// have an xfs volume no pod publishes any more, so the agent grows them;
// both filesystems are frozen before their growth is due. Once the agent
// waits inside a growth, a third VMI's volume is hotplugged: it must be
// mounted about as fast as a hotplug on a quiet node, not after the thaw.
// /healthz must stay 200 throughout, also once both growths were written
// off while their threads still wait on the frozen filesystems (a restart
// cannot end such a wait, only take the agent away). After the thaw both
// filesystems grow.
func TestFrozenGrowthWhileHotplugging(t *testing.T) {
	e := newEnv(t, "--grow-filesystems",
		"--grow-timeout", frozenGrowTimeout.String(), "--stuck-limit", frozenStuckLimit.String())
	cold := []*vm{e.newVM("tenant-f", "cold-1"), e.newVM("tenant-f", "cold-2")}
	var data []simnode.Volume
	for _, v := range cold {
		vol := v.addVolume("data", "xfs", testutil.MinXFSSize)
		hp := v.newAttachmentPod(vol)
		v.apply()
		v.waitMounted(vol)
		// No pod publishes it any more: the kubelet's NodeExpandVolume
		// will not run, the agent grows it through the launcher's bind.
		v.replaceAttachmentPod(hp, []simnode.Volume{vol})
		v.apply()
		data = append(data, vol)
	}
	ids := map[*vm]int{cold[0]: cold[0].waitMounted(data[0]), cold[1]: cold[1].waitMounted(data[1])}

	// The same hotplug on the same node with nothing frozen: the bound of
	// the measured one is derived from it, so a slow machine moves both.
	baseline := e.timedHotplug(e.newVM("tenant-f", "calm"))
	t.Logf("hotplug on a quiet node: mounted %s after the VMI update", baseline.Round(time.Millisecond))
	hot := e.newVM("tenant-f", "hot")
	health := e.watchHealth()

	var thaws []func()
	e.step("both filesystems frozen while their growth is due", func(t *testing.T) {
		for i, v := range cold {
			thaws = append(thaws, e.freeze(v.Target(data[i])))
			e.must(v.Disks["data"].Grow(480 << 20))
			v.SetRequest("data", 480<<20)
			v.apply()
		}
		e.eventually("the agent waits inside a growth on a frozen filesystem", 60*time.Second, func() error {
			n := 0
			for i, v := range cold {
				tids, err := e.agent.BlockedOn(devOf(t, v.Target(data[i])))
				if err != nil {
					return err
				}
				n += len(tids)
			}
			if n == 0 {
				return fmt.Errorf("no thread of the agent waits on the frozen filesystems")
			}
			return nil
		})
	})

	e.step("a third VMI's hotplug is not held by the frozen growth", func(t *testing.T) {
		took := e.timedHotplug(hot)
		// The issue asks for 1 s. A loaded 2-core machine can miss that on
		// any hotplug, so the bound also scales with the same hotplug
		// measured above on this machine; what it catches is an attach
		// that waited for a growth's deadline (5 s here, 10 min by
		// default) or for the thaw.
		bound := max(time.Second, 3*baseline)
		t.Logf("hotplug while growth waits on frozen filesystems: mounted %s after the VMI update (baseline %s, bound %s)",
			took.Round(time.Millisecond), baseline.Round(time.Millisecond), bound.Round(time.Millisecond))
		if took > bound {
			t.Fatalf("the hotplug took %s with growth frozen, more than %s (3 x the %s of a quiet node, at least 1 s)",
				took.Round(time.Millisecond), bound, baseline.Round(time.Millisecond))
		}
		hot.roundTrip(t, hot.Vol("vol"), "beside-a-frozen-growth")
	})

	e.step("both growths written off, /healthz still 200", func(t *testing.T) {
		for _, v := range cold {
			ev := e.waitEvent(v.NS, v.Name, "HotplugStuck", "Volume data: grow ")
			t.Logf("%s: %s", v.Name, ev.Message)
		}
		// The first growth began at least two grow timeouts ago, far past
		// --stuck-limit, and its thread still waits on the frozen
		// filesystem: a liveness that counted growth would fail now.
		for i, v := range cold {
			tids, err := e.agent.BlockedOn(devOf(t, v.Target(data[i])))
			e.must(err)
			t.Logf("%s: %d agent threads wait on the frozen filesystem", v.Name, len(tids))
		}
		e.must(healthz(e.agent))
		e.must(health())
		for v, id := range ids {
			if got := v.waitMounted(v.Vol("data")); got != id {
				t.Fatalf("%s: data remounted while frozen: mount %d, was %d", v.Name, got, id)
			}
		}
	})

	e.step("after the thaw both filesystems grow", func(t *testing.T) {
		for _, thaw := range thaws {
			thaw()
		}
		for i, v := range cold {
			e.waitEvent(v.NS, v.Name, "FilesystemExpanded", "data: filesystem xfs grew")
			if size := v.launcherStatfs(t, data[i]); size < 400<<20 {
				t.Fatalf("%s: the launcher sees %d bytes, not grown", v.Name, size)
			}
			if got := v.waitMounted(data[i]); got != ids[v] {
				t.Fatalf("%s: data remounted: mount %d, was %d", v.Name, got, ids[v])
			}
		}
		e.eventually("no agent thread waits on the thawed filesystems", 30*time.Second, func() error {
			for i, v := range cold {
				if tids, err := e.agent.BlockedOn(devOf(t, v.Target(data[i]))); err != nil || len(tids) > 0 {
					return fmt.Errorf("threads %v still wait (%v)", tids, err)
				}
			}
			return nil
		})
		e.must(health())
	})
}

// timedHotplug gives v an ext4 volume "vol" and returns the time from the
// VMI update that asks for it to its bind in the launcher. The claim, disk
// and attachment pod exist before the clock starts, as they do before
// virt-controller writes the volume's status.
func (e *env) timedHotplug(v *vm) time.Duration {
	e.t.Helper()
	vol := v.addVolume("vol", "ext4", 64<<20)
	v.newAttachmentPod(vol)
	start := time.Now()
	v.apply()
	e.eventuallyFast("hotplug of "+v.Name, 60*time.Second, func() error {
		_, err := v.MountID(vol)
		return err
	})
	return time.Since(start)
}

// freeze freezes the filesystem holding path (FIFREEZE on a descriptor of
// any of its files freezes all of it, as fsfreeze and a Longhorn snapshot
// do) and returns a func that thaws it. It is thawed when the test ends
// whatever happened, before the agent and the node are torn down: a
// filesystem left frozen would hang both.
func (e *env) freeze(path string) func() {
	e.t.Helper()
	f, err := os.Open(path)
	e.must(err)
	if err := unix.IoctlSetInt(int(f.Fd()), ioctlFIFREEZE, 0); err != nil {
		f.Close()
		e.t.Fatalf("FIFREEZE %q: %v", path, err)
	}
	var once sync.Once
	root := e.root
	thaw := func() {
		once.Do(func() {
			if err := unix.IoctlSetInt(int(f.Fd()), ioctlFITHAW, 0); err != nil {
				root.Errorf("FITHAW %q: %v", path, err)
			}
			f.Close()
		})
	}
	root.Cleanup(thaw)
	return thaw
}

// devOf is the device of the filesystem holding path.
func devOf(t *testing.T, path string) uint64 {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	return st.Dev
}
