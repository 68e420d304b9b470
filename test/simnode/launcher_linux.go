package simnode

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// Launcher is a virt-launcher stand-in: a process in a slave mount
// namespace (the HostToContainer view of hotplug-disks) inside the pod's
// device cgroup, which starts out denying every block device.
type Launcher struct {
	UID    string
	Pid    int
	Cgroup string
	node   *Node
	cmd    *exec.Cmd
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
	cmd := exec.Command("unshare", "--mount", "--propagation", "slave", "--", "sleep", "infinity")
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	l := &Launcher{UID: uid, Pid: cmd.Process.Pid, Cgroup: ctr, node: n, cmd: cmd}
	n.defer_(l.Stop)
	if err := os.WriteFile(filepath.Join(ctr, "cgroup.procs"), []byte(itoa(l.Pid)), 0o644); err != nil {
		return nil, fmt.Errorf("move launcher into %q: %w", ctr, err)
	}
	for i := 0; i < 500; i++ {
		if exe, _ := os.Readlink(fmt.Sprintf("/proc/%d/exe", l.Pid)); strings.HasSuffix(exe, "sleep") {
			return l, nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return nil, fmt.Errorf("launcher %d did not start", l.Pid)
}

// Stop kills the launcher process.
func (l *Launcher) Stop() {
	if l.cmd.ProcessState == nil {
		_ = l.cmd.Process.Kill()
		_ = l.cmd.Wait()
	}
}

// Exec runs a shell script in the launcher's mount namespace and device
// cgroup, as a process inside the virt-launcher container would run.
func (l *Launcher) Exec(script string) (string, error) {
	wrapped := fmt.Sprintf("echo $$ > %s/cgroup.procs && %s", l.Cgroup, script)
	return run("nsenter", fmt.Sprintf("--mount=/proc/%d/ns/mnt", l.Pid), "--", "sh", "-c", wrapped)
}

// Path is where the launcher sees a file of its hotplug-disks directory,
// as a host path (the launcher's view keeps the host's paths).
func (l *Launcher) Path(name string) string {
	return filepath.Join(l.node.HotplugDisksDir(l.UID), name)
}

// MountInfo is the launcher's own view of the mount table.
func (l *Launcher) MountInfo() (string, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", l.Pid))
	return string(b), err
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
