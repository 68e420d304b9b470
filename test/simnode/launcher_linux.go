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
// namespace (the HostToContainer view of hotplug-disks) inside the pod's
// device cgroup, which starts out denying every block device.
type Launcher struct {
	*sandbox.Process
	UID    string
	Cgroup string
	node   *Node
}

// StartLauncher makes the launcher's hotplug-disks directory and pod
// cgroup and starts its process.
func (n *Node) StartLauncher(uid string) (*Launcher, error) {
	if err := os.MkdirAll(n.HotplugDisksDir(uid), 0o777); err != nil {
		return nil, err
	}
	pod := filepath.Join(n.CgroupRoot, "kubepods", "pod"+uid)
	ctr := filepath.Join(pod, "compute")
	if err := os.MkdirAll(ctr, 0o755); err != nil {
		return nil, fmt.Errorf("launcher cgroup %q: %w", ctr, err)
	}
	// A container runtime's default: no block devices, the usual char ones.
	for _, rule := range []string{"a", "c 1:3 rwm", "c 1:5 rwm", "c 1:9 rwm", "c 136:* rwm"} {
		file := "devices.allow"
		if rule == "a" {
			file = "devices.deny"
		}
		if err := os.WriteFile(filepath.Join(ctr, file), []byte(rule), 0o644); err != nil {
			return nil, fmt.Errorf("device rule %q in %q: %w", rule, ctr, err)
		}
	}
	p, err := sandbox.StartSlaveProcess()
	if err != nil {
		return nil, err
	}
	l := &Launcher{Process: p, UID: uid, Cgroup: ctr, node: n}
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
