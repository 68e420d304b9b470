// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/hpmount/hpmount/test/harness"
	"github.com/hpmount/hpmount/test/simnode"
)

// walkState is what the steps hand each other.
type walkState struct {
	data, raw, second simnode.Volume
	dataID            int
	hp1, hp2          *corev1.Pod
}

type step struct {
	name, notice string
	run          func(*walkState) error
}

// walk runs the steps in order; after each it shows the node's state.
func (d *demo) walk() error {
	steps := []step{
		{"hotplug an xfs filesystem volume and a block volume",
			"the file disk.img (not its directory) is bind-mounted onto $HP/data.img; $HP/raw is a device node allowed in the launcher's device cgroup.",
			d.stepHotplug},
		{"storage re-attach under a running QEMU (harvester#11208)",
			"the block volume is published anew on another device while the VM's QEMU holds the old one: the agent moves $HP/raw to the new device, yet QEMU's descriptor stays on the old; diag says stale-open naming QEMU's pid and the agent warns once; a VM restart (a new QEMU) opens the new device (staleopen_linux.go).",
			d.stepStaleOpen},
		{"hotplug a second volume (ext4, 64 MiB): the attachment pod is replaced",
			"the old attachment pod's CSI mount of data is gone, yet $HP/data.img keeps the same mount id: the launcher's bind holds the filesystem.",
			d.stepReplace},
		{"resize after the replacement: grow data to 480 MiB",
			"no CSI NodeExpandVolume can run for data any more, its CSI mount is gone: the agent finds the filesystem under the launcher's bind by major:minor and grows it online. (A volume still published, like second, is left to the kubelet's NodeExpandVolume.) Only then has KubeVirt's rule room for a larger disk.img, and QEMU's query-block shows the new size.",
			d.stepResize},
		{"the storage side: Longhorn attaches data here",
			"diag shows, for each volume, the storage.k8s.io VolumeAttachment of its PV on this node and, with Longhorn installed, the Longhorn volume's state, robustness and node and who holds attachment tickets on it: what explains a detach stuck behind another ticket or a volume attached to the wrong node.",
			d.stepStorage},
		{"unplug the block volume",
			"QEMU unplugs raw first, as virt-launcher does; then only $HP/raw and its device-cgroup rule go; the filesystem volumes keep their mount ids.",
			d.stepUnplug},
		{"kill -9 the agent and restart it",
			"mountinfo is the source of truth: the new agent adopts every mount, and its operation counters show only result=\"unchanged\".",
			d.stepRestart},
		{"delete the VMI",
			"every bind mount, device node, cgroup rule and per-volume metric of the VMI goes away.",
			d.stepDelete},
	}
	st := &walkState{}
	for i, s := range steps {
		heading(i+1, len(steps), s.name, s.notice)
		started := time.Now()
		if err := s.run(st); err != nil {
			return fmt.Errorf("step %d (%s): %w", i+1, s.name, err)
		}
		item("(step done in %s)", time.Since(started).Round(100*time.Millisecond))
		if err := d.show(); err != nil {
			return fmt.Errorf("after step %d (%s): %w", i+1, s.name, err)
		}
	}
	return nil
}

func (d *demo) stepHotplug(st *walkState) error {
	v := d.vm
	var err error
	if st.data, err = v.addVolume("data", "xfs", 320<<20); err != nil {
		return err
	}
	if st.raw, err = v.addVolume("raw", "", 32<<20); err != nil {
		return err
	}
	if st.hp1, err = v.newAttachmentPod(st.data, st.raw); err != nil {
		return err
	}
	if err := v.apply(); err != nil {
		return err
	}
	if st.dataID, err = v.waitMounted(st.data); err != nil {
		return err
	}
	ok("$HP/data.img is a bind of disk.img, host mount id %d", st.dataID)
	if err := v.waitNode(st.raw); err != nil {
		return err
	}
	ok("$HP/raw is a block device node")
	if err := v.roundTrip(st.data, "hpmount-fs-pattern"); err != nil {
		return err
	}
	if err := v.roundTrip(st.raw, "hpmount-block-pattern"); err != nil {
		return err
	}
	for _, name := range []string{"data", "raw"} {
		if err := d.waitEvent("VolumeMounted", name); err != nil {
			return err
		}
	}
	return d.eventually("volumeStatus of data MountedToPod", waitTimeout, func() error {
		return d.phaseIs("data", "MountedToPod", "VolumeMountedToPod")
	})
}

func (d *demo) stepReplace(st *walkState) error {
	v := d.vm
	var err error
	if st.second, err = v.addVolume("second", "ext4", 64<<20); err != nil {
		return err
	}
	// KubeVirt: a new pod for the new set, the old one deleted; the kubelet
	// unpublishes what the old pod had. data is not published for the new
	// pod: its only remaining mount is the launcher's bind.
	if st.hp2, err = v.newAttachmentPod(st.raw, st.second); err != nil {
		return err
	}
	for _, vol := range []simnode.Volume{st.data, st.raw} {
		if err := v.unpublish(st.hp1.UID, vol); err != nil {
			return err
		}
	}
	if err := v.deletePod(st.hp1); err != nil {
		return err
	}
	v.Attach[st.data.Name] = st.hp2.UID
	item("old attachment pod %s deleted; kubelet unmounted its CSI mount of data", st.hp1.Name)
	if err := v.apply(); err != nil {
		return err
	}
	id, err := v.waitMounted(st.second)
	if err != nil {
		return err
	}
	ok("$HP/second.img is a bind of disk.img, host mount id %d", id)
	item("waiting 3s: a resync period passes")
	if err := d.sleep(3 * time.Second); err != nil {
		return err
	}
	if _, err := os.Stat(d.node.CSIMountDir(string(st.hp1.UID), st.data.PV)); err == nil {
		return fmt.Errorf("the old pod's CSI mount directory of data still exists")
	}
	if err := d.sameMountIDs(map[string]int{"data": st.dataID}); err != nil {
		return err
	}
	if err := d.onlyMountIsBind(st.data); err != nil {
		return err
	}
	if err := v.roundTrip(st.data, "after-replacement"); err != nil {
		return err
	}
	if err := v.roundTrip(st.second, "second-volume"); err != nil {
		return err
	}
	return d.waitEvent("VolumeMounted", "second")
}

// sameMountIDs checks that filesystem volumes still carry the given mounts.
func (d *demo) sameMountIDs(want map[string]int) error {
	for name, id := range want {
		got, err := d.vm.MountID(d.vm.Vol(name))
		if err != nil {
			return err
		}
		if got != id {
			return fmt.Errorf("%s was remounted: mount id %d, was %d", name, got, id)
		}
		ok("$HP/%s.img: still host mount id %d (not remounted, not doubled)", name, id)
	}
	return nil
}

// onlyMountIsBind checks that the launcher's bind is the last mount of a
// volume's filesystem on the host.
func (d *demo) onlyMountIsBind(vol simnode.Volume) error {
	maj, min, err := d.vm.Disks[vol.Name].Rdev()
	if err != nil {
		return err
	}
	t, err := harness.HostTable()
	if err != nil {
		return err
	}
	ms := t.ByDevice(maj, min)
	if len(ms) != 1 || ms[0].MountPoint != d.vm.Target(vol) {
		var where []string
		for _, m := range ms {
			where = append(where, d.short(m.MountPoint))
		}
		return fmt.Errorf("filesystem of %s (%d:%d) mounted at %v, want only its bind", vol.Name, maj, min, where)
	}
	ok("the host mounts %s's filesystem (%d:%d) only at $HP/%s.img now", vol.Name, maj, min, vol.Name)
	return nil
}

func (d *demo) stepResize(st *walkState) error {
	v := d.vm
	before, err := d.launcherStatfs(st.data)
	if err != nil {
		return err
	}
	disk := v.Disks[st.data.Name]
	const newSize = 480 << 20
	if err := disk.Grow(newSize); err != nil {
		return fmt.Errorf("grow %s: %w", disk.Device, err)
	}
	item("storage backend grew %s to %d MiB (losetup --set-capacity)", disk.Device, newSize>>20)
	v.SetCapacity(st.data.Name, newSize)
	if err := v.apply(); err != nil {
		return err
	}
	if err := d.waitEvent("FilesystemExpanded", "data"); err != nil {
		return err
	}
	after, err := d.launcherStatfs(st.data)
	if err != nil {
		return err
	}
	if after.bytes <= before.bytes {
		return fmt.Errorf("filesystem of data did not grow in the launcher: %d bytes before, %d after", before.bytes, after.bytes)
	}
	sub("statfs through the launcher (df -h $HP/data.img), before and after")
	block(d.short(before.df + "\n" + after.df[strings.IndexByte(after.df, '\n')+1:]))
	ok("the launcher sees %s of filesystem, was %s", mib(float64(after.bytes)), mib(float64(before.bytes)))
	if err := d.growDiskImage(st.data, newSize); err != nil {
		return err
	}
	return d.sameMountIDs(map[string]int{"data": st.dataID})
}

type statfs struct {
	bytes int64  // total size of the filesystem
	df    string // df -h output
}

// launcherStatfs asks, inside the launcher, for the filesystem size behind a
// volume's entry: what the guest's disk.img lives on.
func (d *demo) launcherStatfs(vol simnode.Volume) (statfs, error) {
	t := d.vm.Target(vol)
	out, err := d.vm.L.Exec(fmt.Sprintf("stat -f -c '%%S %%b' %s && df -h %s", t, t))
	if err != nil {
		return statfs{}, fmt.Errorf("statfs %s in the launcher: %w", vol.Name, err)
	}
	first, rest, _ := strings.Cut(out, "\n")
	f := strings.Fields(first)
	if len(f) != 2 {
		return statfs{}, fmt.Errorf("stat -f of %s printed %q", vol.Name, first)
	}
	bs, err1 := strconv.ParseInt(f[0], 10, 64)
	blocks, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil {
		return statfs{}, fmt.Errorf("stat -f of %s printed %q", vol.Name, first)
	}
	return statfs{bytes: bs * blocks, df: rest}, nil
}

func (d *demo) stepUnplug(st *walkState) error {
	v := d.vm
	secondID, err := v.MountID(st.second)
	if err != nil {
		return err
	}
	maj, min, err := v.Disks[st.raw.Name].Rdev()
	if err != nil {
		return err
	}
	if err := d.qemuUnplug(st.raw); err != nil {
		return err
	}
	v.RemoveVolume(st.raw.Name)
	if err := v.apply(); err != nil {
		return err
	}
	if err := v.waitGone(st.raw); err != nil {
		return err
	}
	ok("$HP/raw removed")
	if err := d.waitEvent("VolumeUnmounted", "raw"); err != nil {
		return err
	}
	rule := fmt.Sprintf("b %d:%d ", maj, min)
	if err := d.eventually("device rule of raw removed", waitTimeout, func() error {
		list, err := os.ReadFile(v.L.Cgroup + "/devices.list")
		if err != nil {
			return err
		}
		if strings.Contains(string(list), rule) {
			return fmt.Errorf("launcher cgroup still allows %s", rule)
		}
		return nil
	}); err != nil {
		return err
	}
	ok("the launcher's device cgroup no longer allows %s", strings.TrimSpace(rule))
	if err := v.unpublish(st.hp2.UID, st.raw); err != nil {
		return err
	}
	item("kubelet unpublished raw from %s", st.hp2.Name)
	return d.sameMountIDs(map[string]int{"data": st.dataID, "second": secondID})
}

func (d *demo) stepRestart(st *walkState) error {
	v := d.vm
	ids := map[string]int{}
	for _, vol := range []simnode.Volume{st.data, st.second} {
		id, err := v.MountID(vol)
		if err != nil {
			return err
		}
		ids[vol.Name] = id
	}
	evs, err := d.vmiEvents()
	if err != nil {
		return err
	}
	mounted := countReason(evs, "VolumeMounted")
	old := d.agent
	if err := old.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill agent: %w", err)
	}
	<-old.Done()
	item("agent pid %d: %v", old.Cmd.Process.Pid, old.Cmd.ProcessState)
	if err := d.startAgent(); err != nil {
		return err
	}
	item("waiting 5s: two resync periods pass")
	if err := d.sleep(5 * time.Second); err != nil {
		return err
	}
	if err := d.sameMountIDs(ids); err != nil {
		return err
	}
	if evs, err = d.vmiEvents(); err != nil {
		return err
	}
	if n := countReason(evs, "VolumeMounted"); n != mounted {
		return fmt.Errorf("the restarted agent emitted %d VolumeMounted events", n-mounted)
	}
	ok("no new VolumeMounted events")
	return d.noChangingOps()
}

// noChangingOps checks the restarted agent's counters: every engine call
// reported "unchanged" (or "not-published").
func (d *demo) noChangingOps() error {
	text, err := d.agent.Scrape()
	if err != nil {
		return err
	}
	calls := 0
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, "hpmount_mount_operations_total{") || strings.HasSuffix(line, " 0") {
			continue
		}
		if !strings.Contains(line, `result="unchanged"`) && !strings.Contains(line, `result="not-published"`) {
			return fmt.Errorf("the restarted agent changed something: %s", line)
		}
		calls++
	}
	if calls == 0 {
		return fmt.Errorf("the restarted agent reported no engine calls")
	}
	ok("every engine call of the new agent reported unchanged or not-published")
	return nil
}

func (d *demo) stepDelete(st *walkState) error {
	v := d.vm
	if d.qemu != nil {
		item("the VM stops: its QEMU (pid %d) exits", d.qemu.Pid)
		d.stopQEMU()
	}
	if err := d.ctrl.DeleteVMI(d.ctx, vmNamespace, vmName); err != nil {
		return fmt.Errorf("delete vmi: %w", err)
	}
	item("VMI %s/%s deleted", vmNamespace, vmName)
	for _, vol := range []simnode.Volume{st.data, st.second} {
		if err := v.waitGone(vol); err != nil {
			return err
		}
	}
	entries, err := os.ReadDir(d.node.HotplugDisksDir(string(v.Launcher.UID)))
	if err != nil || len(entries) != 0 {
		return fmt.Errorf("hotplug-disks still holds %v (%v)", entries, err)
	}
	ok("$HP is empty: data and second unmounted and removed")
	return d.eventually("per-volume metrics of the VMI deleted", waitTimeout, func() error {
		text, err := d.agent.Scrape()
		if err != nil {
			return err
		}
		for _, line := range metricLines(text) {
			if strings.HasPrefix(line, "hpmount_volumes{") || strings.HasPrefix(line, "hpmount_volume_") {
				return fmt.Errorf("still reported: %s", line)
			}
		}
		return nil
	})
}

// phaseIs checks a volume's status.volumeStatus entry.
func (d *demo) phaseIs(volume, phase, reason string) error {
	obj, err := d.dyn.Resource(simnode.VMIResource).Namespace(vmNamespace).Get(d.ctx, vmName, metav1.GetOptions{})
	if err != nil {
		return err
	}
	statuses, _, _ := unstructured.NestedSlice(obj.Object, "status", "volumeStatus")
	for _, s := range statuses {
		m, _ := s.(map[string]any)
		if m["name"] != volume {
			continue
		}
		if m["phase"] != phase || m["reason"] != reason {
			return fmt.Errorf("volume %s: phase %v reason %v", volume, m["phase"], m["reason"])
		}
		ok("VMI status.volumeStatus[%s]: phase %s, reason %s", volume, phase, reason)
		return nil
	}
	return fmt.Errorf("volume %s has no status", volume)
}
