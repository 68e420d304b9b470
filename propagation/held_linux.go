// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package propagation

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// maxFDs bounds the descriptors read per process: QEMU holds a few
// hundred; past that a tenant's process only costs time.
const maxFDs = 4096

// maxPodProcs bounds the processes of a launcher pod that Held looks at.
// A launcher runs a dozen (virt-launcher, virtqemud, virtlogd, QEMU,
// sidecars); a pod with more is told as too many, never as one without
// QEMU, since QEMU may be any of them.
const maxPodProcs = 1024

func (v LauncherView) held(launcher, name string, cur Current) (Hold, string, error) {
	if v.Dir == "" || v.Pods == nil {
		return NoQEMU, "", nil
	}
	cgs, err := v.Pods.Find(v.CgroupRoot, launcher)
	if err != nil {
		return NoQEMU, "no QEMU found: the launcher pod's cgroup is not found", nil
	}
	pids, more, err := v.Pods.Procs(cgs, maxPodProcs)
	if err != nil {
		return NoQEMU, "", err
	}
	if more {
		// A list cut short could leave QEMU out and read as "no QEMU".
		return NoQEMU, "", fmt.Errorf("pod %q: %w (more than %d): what QEMU holds is not checked", launcher, ErrTooManyProcesses, maxPodProcs)
	}
	// The link spells the path with the container's symlinks resolved
	// (/var/run is often ../run), so only its last components are
	// compared; what the descriptor is, is decided by its identity.
	want := "/" + path.Join(path.Base(path.Dir(v.Dir)), path.Base(v.Dir), name)
	hold, detail := NoQEMU, "no QEMU found: no process of the launcher pod runs qemu-kvm or qemu-system-*"
	for _, pid := range pids {
		if !isQEMU(v.Proc, pid) {
			continue
		}
		if hold == NoQEMU {
			hold, detail = NotOpen, fmt.Sprintf("QEMU (pid %d) does not hold %s open", pid, want)
		}
		h, d, loose := heldBy(v.Proc, pid, want, cur)
		if h == StaleOpen {
			return h, d, nil
		}
		if h == Open {
			hold, detail = h, d
		} else if hold == NotOpen && len(loose) > 0 {
			detail = fmt.Sprintf("QEMU (pid %d) does not hold %s open; it holds %s on detached mounts, as a replaced bind leaves "+
				"its old disk.img: nothing read here ties those to this volume (the agent, which saw the former bind, does)",
				pid, want, strings.Join(loose, ", "))
		}
	}
	return hold, detail, nil
}

// isQEMU tells QEMU by its executable, as KubeVirt does (qemu-kvm, at
// /usr/libexec/qemu-kvm in virt-launcher's image, or qemu-system-<arch>),
// never by its command name, which any process sets for itself
// (prctl(PR_SET_NAME)). A process whose executable cannot be read (it
// exited, a kernel thread) is not QEMU.
func isQEMU(proc string, pid int) bool {
	exe, err := os.Readlink(filepath.Join(proc, strconv.Itoa(pid), "exe"))
	if err != nil {
		return false
	}
	return qemuExecutable(strings.TrimSuffix(exe, " (deleted)"))
}

// heldBy looks at the descriptors of one process that name want, or that
// hold a former bind of it. loose are the regular files it holds on
// detached mounts (their links read "/") that no former bind accounts for.
func heldBy(proc string, pid int, want string, cur Current) (hold Hold, detail string, loose []string) {
	fdDir := filepath.Join(proc, strconv.Itoa(pid), "fd")
	ents, err := os.ReadDir(fdDir)
	if err != nil {
		return NotOpen, "", nil
	}
	hold, dir := NotOpen, path.Dir(want)+"/"
	for i, e := range ents {
		if i == maxFDs {
			break
		}
		fd := filepath.Join(fdDir, e.Name())
		link, err := os.Readlink(fd)
		if err != nil {
			continue
		}
		named := strings.HasSuffix(strings.TrimSuffix(link, " (deleted)"), want)
		// A descriptor naming an entry of hotplug-disks is that entry's;
		// only a file named elsewhere (a socket or pipe is named in no
		// directory) may be a former bind's.
		if !named && (cur.Block || !strings.HasPrefix(link, "/") || strings.Contains(link, dir) ||
			len(cur.Former) == 0 && link != "/") {
			continue
		}
		st, err := statAt(unix.AT_FDCWD, fd, 0)
		if err != nil {
			continue // closed meanwhile
		}
		var h Hold
		var d string
		if b, ok := former(st, cur.Former); named {
			h, d = compare(pid, e.Name(), link, st, cur)
		} else if ok {
			h, d = compareFormer(pid, e.Name(), link, b, cur)
		} else {
			if link == "/" && st.mode&unix.S_IFMT == unix.S_IFREG && len(loose) < 4 {
				loose = append(loose, fmt.Sprintf("fd %s (%s)", e.Name(), st.ident))
			}
			continue
		}
		if h == StaleOpen {
			return h, d, nil
		}
		hold, detail = h, d
	}
	return hold, detail, loose
}

// former is the bind in binds that st is on: the same mount, holding the
// same file.
func former(st fileStat, binds []Bound) (Bound, bool) {
	for _, b := range binds {
		if st.mount != 0 && b.Mount == st.mount && b.File == st.ident && st.mode&unix.S_IFMT == unix.S_IFREG {
			return b, true
		}
	}
	return Bound{}, false
}

// compare is the one rule: a block volume is held stale when the device
// QEMU holds is not the one published now; a file when it is another file
// (device and inode) than the one bound there now.
func compare(pid int, fd, link string, st fileStat, cur Current) (Hold, string) {
	if cur.Block {
		held := st.rdev
		if st.mode&unix.S_IFMT != unix.S_IFBLK || held != cur.Device {
			return StaleOpen, fmt.Sprintf("QEMU (pid %d, fd %s) holds %s as device %d:%d, but the volume is now device %d:%d",
				pid, fd, link, unix.Major(held), unix.Minor(held), unix.Major(cur.Device), unix.Minor(cur.Device))
		}
		return Open, fmt.Sprintf("QEMU (pid %d) holds device %d:%d", pid, unix.Major(held), unix.Minor(held))
	}
	if st.ident != cur.File {
		return StaleOpen, fmt.Sprintf("QEMU (pid %d, fd %s) holds %s as %s, but the volume's disk.img is now %s",
			pid, fd, link, st.ident, cur.File)
	}
	return Open, fmt.Sprintf("QEMU (pid %d) holds %s", pid, st.ident)
}

// compareFormer is compare of a descriptor on a former bind of the target.
func compareFormer(pid int, fd, link string, b Bound, cur Current) (Hold, string) {
	if b.File == cur.File {
		return Open, fmt.Sprintf("QEMU (pid %d) holds %s", pid, b.File)
	}
	return StaleOpen, fmt.Sprintf("QEMU (pid %d, fd %s) holds the volume's former disk.img %s on the launcher's former bind (mount %d, "+
		"detached since the bind was replaced, so the descriptor reads %q), but the volume's disk.img is now %s",
		pid, fd, b.File, b.Mount, link, cur.File)
}
