package propagation

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/podcgroup"
)

// maxFDs bounds the descriptors read per process: QEMU holds a few
// hundred; past that a tenant's process only costs time.
const maxFDs = 4096

func (v LauncherView) held(launcher, name string, cur Current) (Hold, string, error) {
	if v.Dir == "" || v.Pods == nil {
		return NoQEMU, "", nil
	}
	cgs, err := v.Pods.Find(v.CgroupRoot, launcher)
	if err != nil {
		return NoQEMU, "no QEMU found: the launcher pod's cgroup is not found", nil
	}
	pids, err := podcgroup.Procs(cgs)
	if err != nil {
		return NoQEMU, "", err
	}
	// The link spells the path with the container's symlinks resolved
	// (/var/run is often ../run), so only its last components are
	// compared; what the descriptor is, is decided by its identity.
	want := "/" + path.Join(path.Base(path.Dir(v.Dir)), path.Base(v.Dir), name)
	hold, detail := NoQEMU, "no QEMU found: no process of the launcher pod is qemu"
	for _, pid := range pids {
		if !isQEMU(v.Proc, pid) {
			continue
		}
		if hold == NoQEMU {
			hold, detail = NotOpen, fmt.Sprintf("QEMU (pid %d) does not hold %s open", pid, want)
		}
		h, d := heldBy(v.Proc, pid, want, cur)
		if h == StaleOpen {
			return h, d, nil
		}
		if h == Open {
			hold, detail = h, d
		}
	}
	return hold, detail, nil
}

func isQEMU(proc string, pid int) bool {
	comm, err := os.ReadFile(filepath.Join(proc, strconv.Itoa(pid), "comm"))
	return err == nil && strings.HasPrefix(string(comm), "qemu")
}

// heldBy looks at the descriptors of one process that name want.
func heldBy(proc string, pid int, want string, cur Current) (Hold, string) {
	fdDir := filepath.Join(proc, strconv.Itoa(pid), "fd")
	ents, err := os.ReadDir(fdDir)
	if err != nil {
		return NotOpen, ""
	}
	hold, detail := NotOpen, ""
	for i, e := range ents {
		if i == maxFDs {
			break
		}
		fd := filepath.Join(fdDir, e.Name())
		link, err := os.Readlink(fd)
		if err != nil || !strings.HasSuffix(strings.TrimSuffix(link, " (deleted)"), want) {
			continue
		}
		var st unix.Stat_t
		if err := unix.Stat(fd, &st); err != nil {
			continue // closed meanwhile
		}
		hold, detail = compare(pid, e.Name(), link, &st, cur)
		if hold == StaleOpen {
			return hold, detail
		}
	}
	return hold, detail
}

// compare is the one rule: a block volume is held stale when the device
// QEMU holds is not the one published now; a file when it is another file
// (device and inode) than the one bound there now.
func compare(pid int, fd, link string, st *unix.Stat_t, cur Current) (Hold, string) {
	if cur.Block {
		held := uint64(st.Rdev)
		if st.Mode&unix.S_IFMT != unix.S_IFBLK || held != cur.Device {
			return StaleOpen, fmt.Sprintf("QEMU (pid %d, fd %s) holds %s as device %d:%d, but the volume is now device %d:%d",
				pid, fd, link, unix.Major(held), unix.Minor(held), unix.Major(cur.Device), unix.Minor(cur.Device))
		}
		return Open, fmt.Sprintf("QEMU (pid %d) holds device %d:%d", pid, unix.Major(held), unix.Minor(held))
	}
	held := Ident{Dev: uint64(st.Dev), Ino: st.Ino}
	if held != cur.File {
		return StaleOpen, fmt.Sprintf("QEMU (pid %d, fd %s) holds %s as %s, but the volume's disk.img is now %s",
			pid, fd, link, held, cur.File)
	}
	return Open, fmt.Sprintf("QEMU (pid %d) holds %s", pid, held)
}
