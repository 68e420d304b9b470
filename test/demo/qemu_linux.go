// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/mount"
	"github.com/hpmount/hpmount/test/qemu"
	"github.com/hpmount/hpmount/test/simnode"
)

// qemuPorts is the number of hotplug slots the VM's QEMU gets: one per
// volume the walk ever has plugged at once, and some to spare.
const qemuPorts = 8

// vmQEMU is the VM's own QEMU, run as the launcher's (its mount
// namespace, uid/gid 107, its compute container's device cgroup), and
// the disks it has plugged: volume name → root port.
type vmQEMU struct {
	*qemu.QEMU
	ports map[string]string
}

// showQEMU plays virt-launcher after a step: it starts the VM's QEMU
// when the VM has a disk and none runs, plugs each hotplugged volume the
// launcher has an entry for as libvirt does (blockdev-add, device_add),
// and prints QEMU's query-block: what the VM sees.
func (d *demo) showQEMU() error {
	v := d.vm
	var present []simnode.Volume
	for _, vol := range v.Vols {
		if _, err := os.Lstat(v.Target(vol)); err == nil {
			present = append(present, vol)
		}
	}
	if d.qemu == nil && len(present) == 0 {
		sub("QEMU: none runs (the VM has no hotplugged disk, or it is stopped)")
		return nil
	}
	if d.qemu == nil {
		q, err := qemu.Start(d.ctx, qemu.Options{MountNamespaceOf: v.L.Pid, UID: 107, GID: 107,
			Cgroups: []string{v.L.Cgroup}, RootPorts: qemuPorts})
		if err != nil {
			return fmt.Errorf("start the VM's QEMU in the launcher: %w", err)
		}
		d.qemu = &vmQEMU{QEMU: q, ports: map[string]string{}}
		item("the VM's QEMU started in the launcher: pid %d, uid/gid 107, compute's device cgroup", q.Pid)
	}
	for _, vol := range present {
		if _, ok := d.qemu.ports[vol.Name]; !ok {
			if err := d.qemuPlug(vol); err != nil {
				return err
			}
		}
	}
	return d.printQueryBlock()
}

// qemuPlug is virt-launcher's hotplug of vol: blockdev-add of the entry
// at the path the compute container sees, with KubeVirt's cache mode
// ("none", O_DIRECT, where the file accepts it), then device_add of a
// virtio-blk disk on a free root port.
func (d *demo) qemuPlug(vol simnode.Volume) error {
	q := d.qemu
	port := ""
	for i := 1; i <= qemuPorts && port == ""; i++ {
		if p := fmt.Sprintf("rp%d", i); !slices.Contains(slices.Collect(maps.Values(q.ports)), p) {
			port = p
		}
	}
	if port == "" {
		return fmt.Errorf("QEMU has no free root port for %s", vol.Name)
	}
	f := qemu.File{Path: d.vm.L.ContainerPath(filepath.Base(d.vm.Target(vol))), Block: vol.Block,
		Direct: acceptsDirectIO(d.vm.Target(vol))}
	if f.Block && f.Direct {
		f.AIO = "native"
	}
	if err := q.BlockdevAdd(d.ctx, vol.Name, f); err != nil {
		return fmt.Errorf("QEMU's blockdev-add of %s as uid 107: %w", f.Path, err)
	}
	if err := q.DeviceAdd(d.ctx, qemuDisk(vol), vol.Name, port); err != nil {
		return err
	}
	q.ports[vol.Name] = port
	ok("QEMU opened %s as uid 107 (blockdev-add, cache.direct=%t) and plugged it in as %s on %s", f.Path, f.Direct, qemuDisk(vol), port)
	return nil
}

// qemuUnplug is virt-launcher's unplug of vol before the volume leaves
// the launcher: device_del (waiting for DEVICE_DELETED), then
// blockdev-del, which closes QEMU's descriptor.
func (d *demo) qemuUnplug(vol simnode.Volume) error {
	q := d.qemu
	if q == nil {
		return nil
	}
	if _, plugged := q.ports[vol.Name]; !plugged {
		return nil
	}
	if err := q.DeviceDel(d.ctx, qemuDisk(vol)); err != nil {
		return err
	}
	if err := q.BlockdevDel(d.ctx, vol.Name); err != nil {
		return err
	}
	delete(q.ports, vol.Name)
	ok("QEMU unplugged %s (device_del, blockdev-del): it holds %s no more", qemuDisk(vol), vol.Name)
	return nil
}

// stopQEMU stops the VM's QEMU, as a VM stop or restart does; its
// descriptors close with it.
func (d *demo) stopQEMU() {
	if d.qemu != nil {
		d.qemu.Kill()
		d.qemu = nil
	}
}

// qemuResize plays virt-launcher after the filesystem of vol grew:
// disk.img is extended to size and QEMU told with block_resize.
func (d *demo) qemuResize(vol simnode.Volume, size int64) error {
	if err := os.Truncate(d.vm.Target(vol), size); err != nil {
		return fmt.Errorf("extend disk.img of %s: %w", vol.Name, err)
	}
	if d.qemu == nil {
		return nil
	}
	if err := d.qemu.BlockResize(d.ctx, vol.Name, size); err != nil {
		return err
	}
	ok("virt-launcher's part: disk.img of %s extended to %s, QEMU told (block_resize)", vol.Name, mib(float64(size)))
	return nil
}

// printQueryBlock prints QEMU's query-block: each disk the VM has, the
// file QEMU opened for it and the size the guest sees.
func (d *demo) printQueryBlock() error {
	infos, err := d.qemu.QueryBlock(d.ctx)
	if err != nil {
		return err
	}
	sub(fmt.Sprintf("the VM's view: QEMU (pid %d) query-block", d.qemu.Pid))
	rows := []string{fmt.Sprintf("%-14s %-42s %s", "DEVICE", "FILE", "SIZE")}
	for _, b := range infos {
		if b.Inserted == nil {
			continue
		}
		dev := strings.TrimSuffix(strings.TrimPrefix(b.QDev, "/machine/peripheral/"), "/virtio-backend")
		rows = append(rows, fmt.Sprintf("%-14s %-42s %s", dev, b.Inserted.File, mib(float64(b.Inserted.Image.VirtualSize))))
	}
	if len(rows) == 1 {
		rows = append(rows, "(no disk)")
	}
	block(strings.Join(rows, "\n"))
	return nil
}

// qemuDisk is the QEMU device id of a volume.
func qemuDisk(vol simnode.Volume) string { return "disk-" + vol.Name }

// acceptsDirectIO tells whether path opens with O_DIRECT, which is how
// KubeVirt picks cache "none" over "writethrough".
func acceptsDirectIO(path string) bool {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECT, 0)
	if err != nil {
		return false
	}
	unix.Close(fd)
	return true
}

// growDiskImage plays virt-launcher after vol's claim grew to capacity:
// disk.img gets KubeVirt's size for it, from the room its filesystem has
// now, and QEMU is told (qemuResize). Without the agent's growth that
// size is no larger than disk.img already is.
func (d *demo) growDiskImage(vol simnode.Volume, capacity int64) error {
	target := d.vm.Target(vol)
	var sfs unix.Statfs_t
	var st unix.Stat_t
	if err := unix.Statfs(target, &sfs); err != nil {
		return fmt.Errorf("statfs %q: %w", target, err)
	}
	if err := unix.Stat(target, &st); err != nil {
		return fmt.Errorf("stat %q: %w", target, err)
	}
	want, err := mount.DiskImageSize(capacity, kubevirtImageOverhead, int64(sfs.Bavail)*sfs.Bsize, st.Blocks*512)
	if err != nil {
		return err
	}
	if want <= st.Size {
		return fmt.Errorf("KubeVirt's rule gives disk.img of %s %d bytes, it has %d already: the filesystem did not make room", vol.Name, want, st.Size)
	}
	return d.qemuResize(vol, want)
}

// kubevirtImageOverhead is KubeVirt's default filesystem overhead for
// disk.img (CDI's 5.5%).
const kubevirtImageOverhead = 0.055
