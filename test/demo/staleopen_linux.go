package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/diag"
	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/test/simnode"
)

// stepStaleOpen plays harvester#11208: a storage re-attach publishes the
// block volume on a new device while QEMU holds the old one. hpmount moves
// the node to the new device, diag says stale-open, the agent warns once
// and sets hpmount_volume_stale_open; nothing on the node can reach
// QEMU's descriptor, so the demo then "restarts the VM" (stops its QEMU).
func (d *demo) stepStaleOpen(st *walkState) error {
	v := d.vm
	qemu, err := d.playQEMU(st.raw)
	if err != nil {
		return err
	}
	defer syscall.Kill(qemu, syscall.SIGKILL)
	ok("qemu-kvm (pid %d) in the launcher holds %s open", qemu, filepath.Join(kubevirt.HotplugDisksMountPath, st.raw.Name))
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
	if err := syscall.Kill(qemu, syscall.SIGKILL); err != nil {
		return fmt.Errorf("stop qemu-kvm %d: %w", qemu, err)
	}
	item("the VM is restarted (its QEMU stopped): only that, or an unplug and plug, reopens the volume; hpmount never acts on QEMU")
	return d.staleOpenGauge("raw", "0")
}

// playQEMU starts, in the launcher's mount namespace and device cgroup, a
// process named qemu-kvm holding vol's entry open at the path KubeVirt's
// compute container uses, as QEMU holds its disks.
func (d *demo) playQEMU(vol simnode.Volume) (int, error) {
	l := d.vm.L
	bin := filepath.Join(d.workDir, "qemu-kvm")
	sleep, err := os.ReadFile("/bin/sleep")
	if err != nil {
		return 0, err
	}
	if err := os.WriteFile(bin, sleep, 0o755); err != nil {
		return 0, err
	}
	hp := d.node.HotplugDisksDir(string(d.vm.Launcher.UID))
	// The compute container mounts hotplug-disks at KubeVirt's path over a
	// /run of its own; mounted here unless the launcher already does.
	script := fmt.Sprintf("mountpoint -q %[1]s || { mount -t tmpfs demo-run /run && mkdir -p %[1]s && mount --bind %[2]s %[1]s; } && "+
		"{ sh -c 'exec 3<%[3]s; exec %[4]s infinity' </dev/null >/dev/null 2>&1 & echo $!; }",
		kubevirt.HotplugDisksMountPath, hp, filepath.Join(kubevirt.HotplugDisksMountPath, vol.Name), bin)
	out, err := l.Exec(script)
	if err != nil {
		return 0, fmt.Errorf("start qemu-kvm in the launcher: %w: %s", err, out)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(out))
	if err != nil {
		return 0, fmt.Errorf("start qemu-kvm in the launcher: %q", out)
	}
	return pid, d.eventually("qemu-kvm holding "+vol.Name, waitTimeout, func() error {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/3", pid))
		comm, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
		if err != nil || strings.TrimSpace(string(comm)) != "qemu-kvm" {
			return fmt.Errorf("pid %d is %q holding %q (%v)", pid, comm, link, err)
		}
		return nil
	})
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
	series := fmt.Sprintf(`hpmount_volume_stale_open{namespace=%q,vmi=%q,volume=%q}`, vmNamespace, vmName, volume)
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
