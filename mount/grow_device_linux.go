package mount

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/isolation"
)

// openDevice finds the node of block device major:minor from its sysfs
// uevent (DEVNAME) and opens it beneath DevRoot without following symlinks,
// as an O_PATH descriptor that is checked to be that very block device.
func (g *Grower) openDevice(major, minor uint32) (*os.File, string, error) {
	num := fmt.Sprintf("%d:%d", major, minor)
	uevent := filepath.Join(g.SysRoot, "dev", "block", num, "uevent")
	b, err := os.ReadFile(uevent)
	if err != nil {
		return nil, "", fmt.Errorf("%w: block device %s: %w", ErrGrowRefused, num, err)
	}
	devname, err := parseUevent(b, major, minor)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %q: %w", ErrGrowRefused, uevent, err)
	}
	root, err := isolation.OpenRoot(g.DevRoot)
	if err != nil {
		return nil, "", err
	}
	defer root.Close()
	f, err := isolation.OpenBeneath(root, devname, isolation.How{Flags: unix.O_PATH})
	if err != nil {
		return nil, "", fmt.Errorf("block device %s: %w", num, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(f.Fd()), &st); err != nil {
		f.Close()
		return nil, "", fmt.Errorf("stat %q: %w", f.Name(), err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFBLK || st.Rdev != unix.Mkdev(major, minor) {
		f.Close()
		return nil, "", fmt.Errorf("%w: %q is not block device %s (mode %#o, rdev %d:%d)", ErrGrowRefused,
			f.Name(), num, st.Mode&unix.S_IFMT, unix.Major(st.Rdev), unix.Minor(st.Rdev))
	}
	return f, filepath.Join(g.DevRoot, devname), nil
}

// parseUevent returns DEVNAME from a sysfs uevent file after checking that
// its MAJOR and MINOR are the ones asked for.
func parseUevent(b []byte, major, minor uint32) (string, error) {
	var devname string
	var gotMajor, gotMinor = -1, -1
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		k, v, _ := strings.Cut(sc.Text(), "=")
		switch k {
		case "DEVNAME":
			devname = v
		case "MAJOR":
			gotMajor, _ = strconv.Atoi(v)
		case "MINOR":
			gotMinor, _ = strconv.Atoi(v)
		}
	}
	if devname == "" {
		return "", fmt.Errorf("no DEVNAME")
	}
	if gotMajor != int(major) || gotMinor != int(minor) {
		return "", fmt.Errorf("names device %d:%d, not %d:%d", gotMajor, gotMinor, major, minor)
	}
	return devname, nil
}

// ownSize is the filesystem's own size in bytes, all blocks and metadata
// included, as the filesystem itself records it right now.
func ownSize(fstype string, dev, target *os.File) (int64, error) {
	if isExt(fstype) {
		return extSize(dev)
	}
	return xfsSize(target)
}

// extSize reads the ext2/3/4 superblock from the device. ext4 keeps its
// superblock in the block device's page cache, so a buffered read sees the
// live block count, also right after an online resize.
func extSize(dev *os.File) (int64, error) {
	f, err := os.OpenFile(isolation.FdPath(dev), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("open %q: %w", dev.Name(), err)
	}
	defer f.Close()
	sb := make([]byte, 1024)
	if _, err := f.ReadAt(sb, 1024); err != nil {
		return 0, fmt.Errorf("read ext4 superblock of %q: %w", dev.Name(), err)
	}
	return parseExtSuperblock(sb)
}

func parseExtSuperblock(sb []byte) (int64, error) {
	const (
		magicOff, magic  = 0x38, 0xEF53
		blocksLoOff      = 0x04
		logBlockSizeOff  = 0x18
		incompatOff      = 0x60
		incompat64bit    = 0x80
		blocksHiOff      = 0x150
		maxLogBlockSize  = 6 // 64 KiB blocks
		superblockLength = 1024
	)
	le := binary.LittleEndian
	if len(sb) < superblockLength || le.Uint16(sb[magicOff:]) != magic {
		return 0, fmt.Errorf("not an ext2/3/4 superblock")
	}
	logBS := le.Uint32(sb[logBlockSizeOff:])
	if logBS > maxLogBlockSize {
		return 0, fmt.Errorf("ext4 superblock: block size 1024<<%d is out of range", logBS)
	}
	blocks := uint64(le.Uint32(sb[blocksLoOff:]))
	if le.Uint32(sb[incompatOff:])&incompat64bit != 0 {
		blocks |= uint64(le.Uint32(sb[blocksHiOff:])) << 32
	}
	if blocks > uint64(1<<63-1)>>(10+logBS) {
		return 0, fmt.Errorf("ext4 superblock: %d blocks overflow", blocks)
	}
	return int64(blocks << (10 + logBS)), nil
}

// xfsGeometryV1 is struct xfs_fsop_geom_v1 from the kernel's xfs_fs.h, the
// oldest geometry every xfs kernel still answers.
type xfsGeometryV1 struct {
	BlockSize, RtExtSize, AGBlocks, AGCount uint32
	LogBlocks, SectSize, InodeSize, IMaxPct uint32
	DataBlocks, RtBlocks, RtExtents         uint64
	LogStart                                uint64
	UUID                                    [16]byte
	SUnit, SWidth                           uint32
	Version                                 int32
	Flags                                   uint32
	LogSectSize, RtSectSize, DirBlockSize   uint32
	_                                       uint32
}

// xfsIocFSGeometryV1 is _IOR('X', 100, struct xfs_fsop_geom_v1).
var xfsIocFSGeometryV1 = uintptr(2<<30 | unsafe.Sizeof(xfsGeometryV1{})<<16 | 'X'<<8 | 100)

// xfsSize asks xfs for its geometry: data blocks (the whole data device,
// internal log included) times the block size. xfs logs superblock changes,
// so the on-disk superblock may lag; the ioctl answers from memory.
func xfsSize(target *os.File) (int64, error) {
	f, err := os.OpenFile(isolation.FdPath(target), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("open %q: %w", target.Name(), err)
	}
	defer f.Close()
	var geo xfsGeometryV1
	if _, _, errno := unix.Syscall(unix.SYS_IOCTL, f.Fd(), xfsIocFSGeometryV1, uintptr(unsafe.Pointer(&geo))); errno != 0 {
		return 0, fmt.Errorf("xfs geometry of %q: %w", target.Name(), errno)
	}
	if geo.BlockSize == 0 || geo.DataBlocks > uint64(1<<63-1)/uint64(geo.BlockSize) {
		return 0, fmt.Errorf("xfs geometry of %q: %d blocks of %d bytes", target.Name(), geo.DataBlocks, geo.BlockSize)
	}
	return int64(geo.DataBlocks) * int64(geo.BlockSize), nil
}

// capSysResource is CAP_SYS_RESOURCE's bit in /proc/<pid>/status masks.
const capSysResource = 24

// hasCapSysResource reports whether this process, and the tools it starts,
// hold CAP_SYS_RESOURCE: it must be in both CapEff and CapBnd. When the
// status cannot be read it says yes, so that no false hint is given.
func hasCapSysResource() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return true
	}
	eff, bnd, ok := capMasks(b)
	return !ok || (eff&bnd)&(1<<capSysResource) != 0
}

// capMasks returns the CapEff and CapBnd masks of a /proc/<pid>/status text.
func capMasks(status []byte) (eff, bnd uint64, ok bool) {
	var gotEff, gotBnd bool
	for _, line := range strings.Split(string(status), "\n") {
		k, v, _ := strings.Cut(line, ":")
		mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
		switch {
		case k == "CapEff" && err == nil:
			eff, gotEff = mask, true
		case k == "CapBnd" && err == nil:
			bnd, gotBnd = mask, true
		}
	}
	return eff, bnd, gotEff && gotBnd
}

func execResize(fstype, device, mountPoint string) error {
	var cmd *exec.Cmd
	switch {
	case isExt(fstype):
		// Online: resize2fs finds the mount of device and asks the
		// kernel to grow it there.
		cmd = exec.Command("resize2fs", device)
	case fstype == "xfs":
		cmd = exec.Command("xfs_growfs", "-d", mountPoint)
	default:
		return fmt.Errorf("no resizer for filesystem type %q", fstype)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s: %w: %s", strings.Join(cmd.Args, " "), err, oneLine(out))
	}
	return nil
}

// oneLine folds a tool's output into one line for an error message.
func oneLine(out []byte) string {
	var parts []string
	for _, l := range strings.Split(string(out), "\n") {
		if l = strings.TrimSpace(l); l != "" {
			parts = append(parts, l)
		}
	}
	return strings.Join(parts, "; ")
}
