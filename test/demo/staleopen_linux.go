// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/diag"
	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/test/simnode"
)

// stepStaleOpen plays harvester#11208: a storage re-attach publishes the
// block volume on a new device while QEMU holds the old one. hpmount moves
// the node to the new device, diag says stale-open, the agent warns once
// and sets hpmount_volume_stale_open; nothing on the node can reach
// QEMU's descriptor, so the demo then "restarts the VM": it stops its
// QEMU, and a new one opens the volumes after the step (showQEMU).
func (d *demo) stepStaleOpen(st *walkState) error {
	v := d.vm
	if d.qemu == nil {
		return fmt.Errorf("the VM's QEMU is not running")
	}
	qemu := d.qemu.Pid
	ok("the VM's QEMU (pid %d) holds %s open since step 1", qemu, filepath.Join(kubevirt.HotplugDisksMountPath, st.raw.Name))
	before, err := v.nodeDevice(st.raw)
	if err != nil {
		return err
	}
	disk, err := v.Node.NewDisk(v.Name+"-raw-reattached", "", 32<<20)
	if err != nil {
		return err
	}
	if err := v.unpublish(st.hp1.UID, st.raw); err != nil {
		return err
	}
	v.Disks[st.raw.Name] = disk
	if err := v.Publish(st.hp1.UID, st.raw); err != nil {
		return err
	}
	item("storage re-attach: the kubelet published raw for %s anew, on %s (was %s)", st.hp1.Name, disk.Device, before)
	if err := d.eventually("$HP/raw moved to the new device", waitTimeout, func() error {
		now, err := v.nodeDevice(st.raw)
		if err == nil && now == before {
			err = fmt.Errorf("$HP/raw still points at %s", now)
		}
		return err
	}); err != nil {
		return err
	}
	now, _ := v.nodeDevice(st.raw)
	ok("the agent's resync moved $HP/raw to %s; QEMU still holds %s", now, before)
	if err := d.waitEvent("VolumeStaleOpen", "raw"); err != nil {
		return err
	}
	if err := d.diagSays("raw", string(diag.StaleOpen)); err != nil {
		return err
	}
	if err := d.staleOpenGauge("raw", "1"); err != nil {
		return err
	}
	if err := d.showEvents(); err != nil {
		return err
	}
	d.stopQEMU()
	item("the VM is restarted (its QEMU %d stopped, a new one starts): only that, or an unplug and plug, reopens the volume; hpmount never acts on QEMU", qemu)
	return d.staleOpenGauge("raw", "0")
}

// nodeDevice is the major:minor $HP/<vol> points at.
func (v *vm) nodeDevice(vol simnode.Volume) (string, error) {
	var st unix.Stat_t
	if err := unix.Stat(v.Target(vol), &st); err != nil {
		return "", err
	}
	return fmt.Sprintf("%d:%d", unix.Major(st.Rdev), unix.Minor(st.Rdev)), nil
}

// diagSays runs `hpmount diag` for the VMI and checks that it reports
// verdict for volume, with the exit status of a problem.
func (d *demo) diagSays(volume, verdict string) error {
	args := d.diagArgs("-o", "table", "-n", vmNamespace, vmName)
	out, err := exec.CommandContext(d.ctx, d.binary, args...).CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != diag.ExitProblems {
		return fmt.Errorf("hpmount diag: %v, want exit status %d: %s", err, diag.ExitProblems, out)
	}
	sub(fmt.Sprintf("hpmount diag -o table -n %s %s ... (exit status %d)", vmNamespace, vmName, ee.ExitCode()))
	block(d.short(string(out)))
	for _, line := range strings.Split(string(out), "\n") {
		if f := strings.Fields(line); slices.Contains(f, volume) && slices.Contains(f, verdict) {
			ok("hpmount diag: %s is %s", volume, verdict)
			return nil
		}
	}
	return fmt.Errorf("hpmount diag does not say %s for %s", verdict, volume)
}

// staleOpenGauge waits for the agent's hpmount_volume_stale_open of volume
// to be value, and shows it.
func (d *demo) staleOpenGauge(volume, value string) error {
	series := fmt.Sprintf(`hpmount_volume_stale_open{namespace=%q,persistentvolumeclaim=%q,vmi=%q,volume=%q}`,
		vmNamespace, vmName+"-"+volume, vmName, volume)
	if err := d.eventually(series+" "+value, waitTimeout, func() error {
		text, err := d.agent.Scrape()
		if err != nil {
			return err
		}
		for _, line := range strings.Split(text, "\n") {
			if strings.HasPrefix(line, series+" ") {
				if got := strings.TrimPrefix(line, series+" "); got != value {
					return fmt.Errorf("%s is %s", series, got)
				}
				return nil
			}
		}
		return fmt.Errorf("no %s", series)
	}); err != nil {
		return err
	}
	ok("%s %s", series, value)
	return nil
}
