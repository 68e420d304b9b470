// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/mountinfo"
	"github.com/hpmount/hpmount/test/csiplugin"
)

// cgroupMount is where the machine's cgroup hierarchies are mounted.
const cgroupMount = "/sys/fs/cgroup"

// hierarchies are the cgroup hierarchies mounted under cgroupMount
// (v1 controllers, name=systemd and the hybrid layout's unified).
func hierarchies() []string {
	entries, _ := os.ReadDir(cgroupMount)
	var dirs []string
	for _, e := range entries {
		p := filepath.Join(cgroupMount, e.Name())
		var st unix.Statfs_t
		if e.IsDir() && unix.Statfs(p, &st) == nil &&
			(st.Type == unix.CGROUP_SUPER_MAGIC || st.Type == unix.CGROUP2_SUPER_MAGIC) {
			dirs = append(dirs, p)
		}
	}
	return dirs
}

// makeCgroupRoot creates the kubelet's cgroupRoot in every hierarchy: the
// kubelet refuses a cgroupRoot that does not exist.
func makeCgroupRoot(root string) error {
	for _, h := range hierarchies() {
		p := filepath.Join(h, root)
		if err := os.Mkdir(p, 0o755); err != nil && !errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("create cgroup %q: %w", p, err)
		}
	}
	return nil
}

// Stop tears the node down and leaves nothing behind: the kubelet, the
// containers' processes (everything in the node's cgroups), containerd's
// shims, containerd, the CSI plugin, every mount under Dir, the loop
// devices over files under Dir, the cgroups, the CNI bridge,
// what the kubelet and the CNI write outside --root-dir, and Dir.
func (n *Node) Stop() error {
	var errs []error
	if n.kubelet != nil {
		errs = append(errs, n.kubelet.Stop())
	}
	if n.csi != nil {
		errs = append(errs, n.csi.Stop())
	}
	errs = append(errs, killCgroupProcs(n.CgroupRoot))
	errs = append(errs, n.killShims())
	if n.containerd != nil {
		errs = append(errs, n.containerd.Stop())
	}
	errs = append(errs, unmountUnder(n.Dir), csiplugin.DetachUnder(n.Dir), removeCgroups(n.CgroupRoot), deleteLink(bridgeName(n.Name)))
	errs = append(errs, n.before.RemoveNew())
	if err := os.RemoveAll(n.Dir); err != nil {
		errs = append(errs, fmt.Errorf("remove node dir: %w", err))
	}
	return errors.Join(errs...)
}

// cgroupProcs lists the processes in every cgroup under root.
func cgroupProcs(root string) []int {
	var pids []int
	for _, h := range hierarchies() {
		_ = filepath.WalkDir(filepath.Join(h, root), func(p string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() || d.Name() != "cgroup.procs" {
				return nil
			}
			data, _ := os.ReadFile(p)
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil {
					pids = append(pids, pid)
				}
			}
			return nil
		})
	}
	return pids
}

// killCgroupProcs SIGKILLs every process in the node's cgroups until none
// is left: containers and their pause processes.
func killCgroupProcs(root string) error {
	deadline := time.Now().Add(15 * time.Second)
	for {
		pids := cgroupProcs(root)
		if len(pids) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("processes left in cgroup %q: %v", root, pids)
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// killShims SIGKILLs the containerd-shim processes serving this node's
// containerd (their command line names its socket) and waits until they
// have exited; they outlive containerd.
func (n *Node) killShims() error {
	pids, err := shimPids(n.ContainerdSocket)
	if err != nil {
		return err
	}
	var shims []daemon
	for _, pid := range pids {
		if st, err := readStat(pid); err == nil {
			shims = append(shims, daemon{PID: pid, Start: st.start, Name: "containerd-shim"})
		}
	}
	return killAll(shims)
}

func shimPids(socket string) ([]int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		args := strings.Split(string(cmdline), "\x00")
		if len(args) > 0 && strings.HasPrefix(filepath.Base(args[0]), "containerd-shim") &&
			bytes.Contains(cmdline, []byte("\x00"+socket+"\x00")) {
			pids = append(pids, pid)
		}
	}
	return pids, nil
}

// unmountUnder detaches every mount at or below dir in this mount
// namespace, deepest first.
func unmountUnder(dir string) error {
	table, err := mountinfo.ReadTable("/proc/self/mountinfo")
	if err != nil {
		return err
	}
	var points []string
	for _, m := range table.Mounts() {
		if m.MountPoint == dir || strings.HasPrefix(m.MountPoint, dir+"/") {
			points = append(points, m.MountPoint)
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	var errs []error
	for _, p := range points {
		if err := unix.Unmount(p, unix.MNT_DETACH); err != nil && !errors.Is(err, unix.EINVAL) && !errors.Is(err, unix.ENOENT) {
			errs = append(errs, fmt.Errorf("unmount %q: %w", p, err))
		}
	}
	return errors.Join(errs...)
}

// removeCgroups removes the node's cgroups, deepest first, in every hierarchy.
func removeCgroups(root string) error {
	var errs []error
	for _, h := range hierarchies() {
		var dirs []string
		_ = filepath.WalkDir(filepath.Join(h, root), func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := os.Remove(dirs[i]); err != nil && !errors.Is(err, fs.ErrNotExist) {
				errs = append(errs, fmt.Errorf("remove cgroup %q: %w", dirs[i], err))
			}
		}
	}
	return errors.Join(errs...)
}

// deleteLink deletes a network link if it exists.
func deleteLink(name string) error {
	if _, err := os.Stat(filepath.Join("/sys/class/net", name)); err != nil {
		return nil
	}
	if out, err := exec.Command("ip", "link", "delete", name).CombinedOutput(); err != nil {
		return fmt.Errorf("ip link delete %s: %w: %s", name, err, out)
	}
	return nil
}
