// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package simnode

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/hpmount/hpmount/internal/sandbox"
	"github.com/hpmount/hpmount/kubevirt"
)

// Launcher is a virt-launcher stand-in: a process in a slave mount
// namespace (the HostToContainer view of hotplug-disks) inside its compute
// container's device cgroup, which starts out denying every block device,
// beside a guest-console-log container's cgroup that does too. The
// containers' cgroups are named as containerd names them with the cgroupfs
// driver: kubepods/pod<uid>/<container ID> (see ContainerID).
type Launcher struct {
	*sandbox.Process
	UID string
	// Cgroup is the compute container's cgroup, Sidecar the
	// guest-console-log container's.
	Cgroup, Sidecar string
	// Restarts is how often compute restarted (RestartCompute).
	Restarts int
	node     *Node
}

// StartLauncher makes the launcher's hotplug-disks directory and its
// containers' cgroups and starts its process in compute's.
func (n *Node) StartLauncher(uid string) (*Launcher, error) {
	if err := os.MkdirAll(n.HotplugDisksDir(uid), 0o777); err != nil {
		return nil, err
	}
	pod := filepath.Join(n.CgroupRoot, "kubepods", "pod"+uid)
	ctr := filepath.Join(pod, ContainerID(uid, kubevirt.ComputeContainer, 0))
	sidecar := filepath.Join(pod, ContainerID(uid, SidecarContainer, 0))
	for _, dir := range []string{ctr, sidecar} {
		if err := containerCgroup(dir); err != nil {
			return nil, err
		}
	}
	p, err := sandbox.StartSlaveProcess()
	if err != nil {
		return nil, err
	}
	l := &Launcher{Process: p, UID: uid, Cgroup: ctr, Sidecar: sidecar, node: n}
	n.defer_(l.Stop)
	if err := os.WriteFile(filepath.Join(ctr, "cgroup.procs"), []byte(strconv.Itoa(l.Pid)), 0o644); err != nil {
		return nil, fmt.Errorf("move launcher into %q: %w", ctr, err)
	}
	// The compute container's view: hotplug-disks at KubeVirt's path, a
	// bind made in the slave namespace and so a slave too
	// (HostToContainer), over a /run of the launcher's own.
	mountIt := fmt.Sprintf("mount -t tmpfs simnode-run /run && mkdir -p %[1]s && mount --bind %[2]s %[1]s",
		kubevirt.HotplugDisksMountPath, n.HotplugDisksDir(uid))
	if out, err := p.Exec("", mountIt); err != nil {
		return nil, fmt.Errorf("launcher %s: mount hotplug-disks at %s: %w %s", uid, kubevirt.HotplugDisksMountPath, err, out)
	}
	return l, nil
}

// containerCgroup makes a container's device cgroup as a runtime leaves
// it: no block devices, the usual char ones.
func containerCgroup(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("container cgroup %q: %w", dir, err)
	}
	for _, rule := range []string{"a", "c 1:3 rwm", "c 1:5 rwm", "c 1:9 rwm", "c 136:* rwm"} {
		file := "devices.allow"
		if rule == "a" {
			file = "devices.deny"
		}
		if err := os.WriteFile(filepath.Join(dir, file), []byte(rule), 0o644); err != nil {
			return fmt.Errorf("device rule %q in %q: %w", rule, dir, err)
		}
	}
	return nil
}

// RestartCompute restarts the compute container as a runtime would: a new
// container ID, a new cgroup with the runtime's default rules (none of what
// was granted to the old one), the process moved into it and the old cgroup
// removed. The pod status names the new ID once the caller writes it
// (Controller.SetComputeRestarts with l.Restarts).
func (l *Launcher) RestartCompute() error {
	next := filepath.Join(filepath.Dir(l.Cgroup), ContainerID(l.UID, kubevirt.ComputeContainer, l.Restarts+1))
	if err := containerCgroup(next); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(next, "cgroup.procs"), []byte(strconv.Itoa(l.Pid)), 0o644); err != nil {
		return fmt.Errorf("move launcher into %q: %w", next, err)
	}
	removeCgroupTree(l.Cgroup)
	l.Cgroup = next
	l.Restarts++
	return nil
}

// ContainerPath is where the launcher's compute container, and QEMU in it,
// opens an entry of its hotplug-disks.
func (l *Launcher) ContainerPath(name string) string {
	return filepath.Join(kubevirt.HotplugDisksMountPath, name)
}

// Exec runs a shell script in the launcher's mount namespace and device
// cgroup, as a process inside the virt-launcher container would run.
func (l *Launcher) Exec(script string) (string, error) {
	return l.Process.Exec(fmt.Sprintf("echo $$ > %s/cgroup.procs", l.Cgroup), script)
}

// Path is where the launcher sees a file of its hotplug-disks directory,
// as a host path (the launcher's view keeps the host's paths).
func (l *Launcher) Path(name string) string {
	return filepath.Join(l.node.HotplugDisksDir(l.UID), name)
}

// removeCgroupTree removes a cgroup subtree, deepest first, after moving
// any process left in it to the root.
func removeCgroupTree(root string) {
	var dirs []string
	filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			dirs = append(dirs, p)
		}
		return nil
	})
	for i := len(dirs) - 1; i >= 0; i-- {
		if procs, err := os.ReadFile(filepath.Join(dirs[i], "cgroup.procs")); err == nil {
			for _, pid := range strings.Fields(string(procs)) {
				_ = os.WriteFile("/sys/fs/cgroup/devices/cgroup.procs", []byte(pid), 0o644)
			}
		}
		_ = os.Remove(dirs[i])
	}
}
