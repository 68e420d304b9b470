// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package grow

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

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
		return nil, "", fmt.Errorf("%w: block device %s: %w", ErrRefused, num, err)
	}
	devname, err := parseUevent(b, major, minor)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %q: %w", ErrRefused, uevent, err)
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
		return nil, "", fmt.Errorf("%w: %q is not block device %s (mode %#o, rdev %d:%d)", ErrRefused,
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

// fsGeometry is what growth needs to know of a filesystem, as the
// filesystem itself records it right now: its size in blocks (all of them,
// metadata included), its block size and, for xfs, its inode space limit.
type fsGeometry struct {
	blocks    uint64
	blockSize uint32
	imaxpct   uint32
}

// bytes is the filesystem's own size in bytes.
func (g fsGeometry) bytes() (int64, error) {
	if g.blockSize == 0 || g.blocks > uint64(math.MaxInt64)/uint64(g.blockSize) {
		return 0, fmt.Errorf("%d blocks of %d bytes", g.blocks, g.blockSize)
	}
	return int64(g.blocks) * int64(g.blockSize), nil
}

// geometry reads the geometry of the filesystem mounted from dev (an O_PATH
// descriptor of its block device) that holds fsFile (an open file on it).
func geometry(fstype string, dev, fsFile *os.File) (fsGeometry, error) {
	if isExt(fstype) {
		return extGeometry(dev)
	}
	geo, err := xfsGeometry(fsFile)
	if err != nil {
		return fsGeometry{}, fmt.Errorf("xfs geometry of %q: %w", fsFile.Name(), err)
	}
	return fsGeometry{blocks: geo.DataBlocks, blockSize: geo.BlockSize, imaxpct: geo.IMaxPct}, nil
}

// extGeometry reads the ext2/3/4 superblock from the device, which it opens
// read-only. ext4 keeps its superblock in the block device's page cache, so
// a buffered read sees the live block count, also right after an online
// resize.
func extGeometry(dev *os.File) (fsGeometry, error) {
	f, err := os.OpenFile(isolation.FdPath(dev), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fsGeometry{}, fmt.Errorf("open %q: %w", dev.Name(), err)
	}
	defer f.Close()
	sb := make([]byte, 1024)
	if _, err := f.ReadAt(sb, 1024); err != nil {
		return fsGeometry{}, fmt.Errorf("read ext4 superblock of %q: %w", dev.Name(), err)
	}
	return parseExtSuperblock(sb)
}

func parseExtSuperblock(sb []byte) (fsGeometry, error) {
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
		return fsGeometry{}, fmt.Errorf("not an ext2/3/4 superblock")
	}
	logBS := le.Uint32(sb[logBlockSizeOff:])
	if logBS > maxLogBlockSize {
		return fsGeometry{}, fmt.Errorf("ext4 superblock: block size 1024<<%d is out of range", logBS)
	}
	g := fsGeometry{blocks: uint64(le.Uint32(sb[blocksLoOff:])), blockSize: 1024 << logBS}
	if le.Uint32(sb[incompatOff:])&incompat64bit != 0 {
		g.blocks |= uint64(le.Uint32(sb[blocksHiOff:])) << 32
	}
	if _, err := g.bytes(); err != nil {
		return fsGeometry{}, fmt.Errorf("ext4 superblock: %w", err)
	}
	return g, nil
}

// capSysResource is CAP_SYS_RESOURCE's bit in /proc/<pid>/status masks.
const capSysResource = 24

// hasCapSysResource reports whether this process holds CAP_SYS_RESOURCE in
// its effective set, which is what the kernel checks on EXT4_IOC_RESIZE_FS.
// When the status cannot be read it says yes, so that no false hint is
// given.
func hasCapSysResource() bool {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return true
	}
	eff, ok := capEff(b)
	return !ok || eff&(1<<capSysResource) != 0
}

// capEff returns the CapEff mask of a /proc/<pid>/status text.
func capEff(status []byte) (uint64, bool) {
	for _, line := range strings.Split(string(status), "\n") {
		if v, ok := strings.CutPrefix(line, "CapEff:"); ok {
			mask, err := strconv.ParseUint(strings.TrimSpace(v), 16, 64)
			return mask, err == nil
		}
	}
	return 0, false
}
