// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mountinfo

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"unsafe"

	"golang.org/x/sys/unix"
)

// golang.org/x/sys has the syscall numbers (SYS_STATMOUNT 457 and
// SYS_LISTMOUNT 458 on amd64 and arm64 alike, from the generic table) and
// MNT_ID_REQ_SIZE_VER0/1, but neither wrappers nor struct statmount; both
// are here, laid out as include/uapi/linux/mount.h of Linux 6.18 has them,
// and only here: package mountwatch asks through namespace_linux.go.

// mntIDReq is struct mnt_id_req: the mount id and, for statmount, the
// request mask or, for listmount, the last id listed; from its second
// version (MNT_ID_REQ_SIZE_VER1, Linux 6.11) the id of the namespace to
// look in, which need not be the caller's.
type mntIDReq struct {
	size    uint32
	spare   uint32
	mntID   uint64
	param   uint64
	mntNsID uint64
}

// newMntIDReq asks about mount id in namespace ns, 0 for the caller's: a
// request of the first version then, which every kernel with statmount
// takes.
func newMntIDReq(ns, id, param uint64) mntIDReq {
	if ns == 0 {
		return mntIDReq{size: unix.MNT_ID_REQ_SIZE_VER0, mntID: id, param: param}
	}
	return mntIDReq{size: unix.MNT_ID_REQ_SIZE_VER1, mntID: id, param: param, mntNsID: ns}
}

// statmountFixed is the fixed part of struct statmount; the strings
// follow it (str[]), each field naming its offset there. Fields are added
// only in place of __spare2, so the layout of a newer kernel is the same.
type statmountFixed struct {
	size           uint32
	mntOpts        uint32 // [str] options (comma separated, escaped)
	mask           uint64 // what was written
	sbDevMajor     uint32
	sbDevMinor     uint32
	sbMagic        uint64
	sbFlags        uint32 // SB_{RDONLY,SYNCHRONOUS,DIRSYNC,LAZYTIME}
	fsType         uint32 // [str]
	mntID          uint64 // unique id
	mntParentID    uint64
	mntIDOld       uint32 // the id of /proc/<pid>/mountinfo
	mntParentIDOld uint32
	mntAttr        uint64 // MOUNT_ATTR_*
	mntPropagation uint64 // MS_{SHARED,SLAVE,PRIVATE,UNBINDABLE}
	mntPeerGroup   uint64
	mntMaster      uint64
	propagateFrom  uint64
	mntRoot        uint32 // [str]
	mntPoint       uint32 // [str]
	mntNsID        uint64
	fsSubtype      uint32 // [str]
	sbSource       uint32 // [str]
	optNum         uint32
	optArray       uint32
	optSecNum      uint32
	optSecArray    uint32
	supportedMask  uint64
	uidmapNum      uint32
	uidmap         uint32
	gidmapNum      uint32
	gidmap         uint32
	spare2         [43]uint64
}

// Request bits of statmount(2). The first five are Linux 6.8's and are
// required; the others (6.11, 6.13) fill Options' fs part, a FUSE
// subtype and Source, and are asked where the kernel has them.
const (
	smSBBasic   = 0x001
	smMntBasic  = 0x002
	smMntRoot   = 0x008
	smMntPoint  = 0x010
	smFSType    = 0x020
	smMntOpts   = 0x080
	smFSSubtype = 0x100
	smSBSource  = 0x200

	smRequired = smSBBasic | smMntBasic | smMntRoot | smMntPoint | smFSType
	smOptional = smMntOpts | smFSSubtype | smSBSource
)

// Superblock flags statmount reports in sb_flags, as mountinfo names them
// after "rw"/"ro" in the super options.
const (
	sbRdonly      = 0x1
	sbSynchronous = 0x10
	sbDirsync     = 0x80
	sbLazytime    = 1 << 25
)

// statmountSize is the buffer of one statmount: the fixed part and room
// for the strings (two paths of PATH_MAX in the worst case); EOVERFLOW
// doubles it.
const statmountSize = 8 << 10

// statBuf is one statmount buffer, 8-byte aligned for statmountFixed.
type statBuf []uint64

var statBufs = sync.Pool{New: func() any { b := make(statBuf, statmountSize/8); return &b }}

// onStatmount, when set, is told of every statmount: tests count what a
// read costs.
var onStatmount func()

// statmount calls statmount(2) for the unique id with the request mask,
// in the caller's mount namespace.
func statmount(id, mask uint64, buf *statBuf) (*statmountFixed, error) {
	return statmountIn(0, id, mask, buf)
}

// statmountIn is statmount in namespace ns (0: the caller's).
func statmountIn(ns, id, mask uint64, buf *statBuf) (*statmountFixed, error) {
	if onStatmount != nil {
		onStatmount()
	}
	for {
		req := newMntIDReq(ns, id, mask)
		b := *buf
		_, _, errno := unix.Syscall6(unix.SYS_STATMOUNT, uintptr(unsafe.Pointer(&req)),
			uintptr(unsafe.Pointer(&b[0])), uintptr(len(b)*8), 0, 0, 0)
		switch {
		case errno == unix.EOVERFLOW && len(b) < 1<<17:
			*buf = make(statBuf, 2*len(b))
			continue
		case errno != 0:
			return nil, errno
		}
		return (*statmountFixed)(unsafe.Pointer(&b[0])), nil
	}
}

// str is the string at offset off of the strings after sm, "" when bit is
// not in sm's mask (not asked, not known, or empty).
func (sm *statmountFixed) str(buf statBuf, bit uint64, off uint32) string {
	return string(sm.bytes(buf, bit, off))
}

// bytes is str in place: a slice of buf, valid until buf is reused.
func (sm *statmountFixed) bytes(buf statBuf, bit uint64, off uint32) []byte {
	if sm.mask&bit == 0 {
		return nil
	}
	all := unsafe.Slice((*byte)(unsafe.Pointer(&buf[0])), len(buf)*8)
	start := int(unsafe.Sizeof(*sm)) + int(off)
	if start >= len(all) || start >= int(sm.size) {
		return nil
	}
	s := all[start:min(len(all), int(sm.size))]
	if k := bytes.IndexByte(s, 0); k >= 0 {
		s = s[:k]
	}
	return s
}

// info converts a statmount answer into the Info mountinfo would show.
func (sm *statmountFixed) info(buf statBuf) Info {
	i := Info{
		ID: int(sm.mntIDOld), Parent: int(sm.mntParentIDOld),
		Major: sm.sbDevMajor, Minor: sm.sbDevMinor,
		Root:       sm.str(buf, smMntRoot, sm.mntRoot),
		MountPoint: sm.str(buf, smMntPoint, sm.mntPoint),
		Options:    mountOptions(sm.mntAttr),
		FSType:     sm.str(buf, smFSType, sm.fsType),
		Source:     sm.str(buf, smSBSource, sm.sbSource),
		UniqueID:   sm.mntID, UniqueParent: sm.mntParentID,
	}
	if sub := sm.str(buf, smFSSubtype, sm.fsSubtype); sub != "" {
		i.FSType += "." + sub
	}
	if i.Source == "" {
		// show_mountinfo's spelling of a mount without a device name.
		i.Source = "none"
	}
	i.SuperOptions = superOptions(sm.sbFlags, sm.str(buf, smMntOpts, sm.mntOpts))
	if sm.mntPropagation&unix.MS_SHARED != 0 {
		i.Shared = int(sm.mntPeerGroup)
	}
	if sm.mntPropagation&unix.MS_SLAVE != 0 {
		i.Master = int(sm.mntMaster)
	}
	i.Unbindable = sm.mntPropagation&unix.MS_UNBINDABLE != 0
	return i
}

// mountOptions spells the per-mount flags as show_mnt_opts does.
func mountOptions(attr uint64) string {
	var b strings.Builder
	b.WriteString("rw")
	if attr&unix.MOUNT_ATTR_RDONLY != 0 {
		b.Reset()
		b.WriteString("ro")
	}
	for _, f := range []struct {
		set  bool
		name string
	}{
		{attr&unix.MOUNT_ATTR_NOSUID != 0, ",nosuid"},
		{attr&unix.MOUNT_ATTR_NODEV != 0, ",nodev"},
		{attr&unix.MOUNT_ATTR_NOEXEC != 0, ",noexec"},
		{attr&unix.MOUNT_ATTR__ATIME == unix.MOUNT_ATTR_NOATIME, ",noatime"},
		{attr&unix.MOUNT_ATTR_NODIRATIME != 0, ",nodiratime"},
		{attr&unix.MOUNT_ATTR__ATIME == unix.MOUNT_ATTR_RELATIME, ",relatime"},
		{attr&unix.MOUNT_ATTR_NOSYMFOLLOW != 0, ",nosymfollow"},
		{attr&unix.MOUNT_ATTR_IDMAP != 0, ",idmapped"},
	} {
		if f.set {
			b.WriteString(f.name)
		}
	}
	return b.String()
}

// superOptions spells the superblock's options as show_mountinfo does:
// rw or ro, the generic flags, then the filesystem's own.
func superOptions(flags uint32, fsOpts string) string {
	s := "rw"
	if flags&sbRdonly != 0 {
		s = "ro"
	}
	for _, f := range []struct {
		bit  uint32
		name string
	}{{sbSynchronous, ",sync"}, {sbDirsync, ",dirsync"}, {sbLazytime, ",lazytime"}} {
		if flags&f.bit != 0 {
			s += f.name
		}
	}
	if fsOpts != "" {
		s += "," + fsOpts
	}
	return s
}

// listmount lists the unique ids of the mounts beneath id: its whole
// subtree, in the order of their ids, not its children alone (recursive
// listing is listmount(2)'s only mode since it was merged, in 6.8).
func listmount(id uint64) ([]uint64, error) {
	return listmountIn(0, id)
}

// listmountIn is listmount in namespace ns (0: the caller's).
func listmountIn(ns, id uint64) ([]uint64, error) {
	var out []uint64
	page := make([]uint64, 512)
	req := newMntIDReq(ns, id, 0)
	for {
		n, _, errno := unix.Syscall6(unix.SYS_LISTMOUNT, uintptr(unsafe.Pointer(&req)),
			uintptr(unsafe.Pointer(&page[0])), uintptr(len(page)), 0, 0, 0)
		if errno != 0 {
			return out, errno
		}
		out = append(out, page[:n]...)
		if int(n) < len(page) {
			return out, nil
		}
		req.param = page[n-1] // continue after the last id listed
	}
}

// statMask is the request mask this kernel answers: the required bits and
// the optional ones it reported for the root mount, 0 until a probe
// answered. Only an answer is kept: a probe that failed once (a transient
// error) is asked again by the next call, or every later read of the
// process would fail with it.
var statMask struct {
	sync.Mutex
	mask atomic.Uint64
}

// probeMask is probe; tests replace it to fail on demand.
var probeMask = probe

// mask is the request mask to use.
func mask() (uint64, error) {
	if m := statMask.mask.Load(); m != 0 {
		return m, nil
	}
	statMask.Lock()
	defer statMask.Unlock()
	if m := statMask.mask.Load(); m != 0 {
		return m, nil
	}
	m, err := probeMask()
	if err != nil {
		return 0, err
	}
	statMask.mask.Store(m)
	return m, nil
}

func checkStatmount() error {
	_, err := probe()
	return err
}

// probe asks the kernel for the root mount with every bit the entries
// use and returns the mask to ask with.
func probe() (uint64, error) {
	var st unix.Statx_t
	err := unix.Statx(unix.AT_FDCWD, "/", unix.AT_STATX_DONT_SYNC, unix.STATX_MNT_ID_UNIQUE, &st)
	if err != nil || st.Mask&unix.STATX_MNT_ID_UNIQUE == 0 {
		return 0, fmt.Errorf("%w: statx of \"/\" gave no unique mount id (%v)", ErrNoStatmount, err)
	}
	buf := statBufs.Get().(*statBuf)
	defer statBufs.Put(buf)
	ask := uint64(smRequired | smOptional)
	sm, err := statmount(st.Mnt_id, ask, buf)
	if errors.Is(err, unix.EINVAL) {
		// A kernel that refuses request bits it does not know.
		ask = smRequired
		sm, err = statmount(st.Mnt_id, ask, buf)
	}
	if err != nil {
		return 0, fmt.Errorf("%w: statmount of \"/\": %w", ErrNoStatmount, err)
	}
	if sm.mask&smRequired != smRequired {
		return 0, fmt.Errorf("%w: statmount of \"/\" answered %#x of %#x", ErrNoStatmount, sm.mask&smRequired, smRequired)
	}
	if _, err := listmount(st.Mnt_id); err != nil {
		return 0, fmt.Errorf("%w: listmount of \"/\": %w", ErrNoStatmount, err)
	}
	// A kernel ignores a request bit it does not know (6.8 to 6.12 for
	// the optional ones): their fields stay empty there.
	return ask, nil
}

func statOne(id uint64) (Info, error) {
	m, err := mask()
	if err != nil {
		return Info{}, err
	}
	buf := statBufs.Get().(*statBuf)
	defer statBufs.Put(buf)
	sm, err := statmount(id, m, buf)
	if err != nil {
		return Info{}, fmt.Errorf("statmount of mount %d: %w", id, err)
	}
	return sm.info(*buf), nil
}

// The flags of name_to_handle_at(2) that x/sys does not name yet
// (include/uapi/linux/fcntl.h).
const (
	atHandleMntIDUnique = 0x001 // Linux 6.12: the 64-bit unique mount id
	atHandleFID         = 0x200 // a handle that only identifies, no export operations needed
	maxHandleSize       = 128   // MAX_HANDLE_SZ
)

// handleMountID is nameToHandleMountID; tests replace it to take the
// listing's way, as a kernel before 6.12 does.
var handleMountID = nameToHandleMountID

// nameToHandleMountID is the unique id of the mount name (in directory fd)
// is on, from name_to_handle_at(2): the lookup crosses onto the mount
// without asking its filesystem, and an identifying handle is made from
// the inode in memory, so it answers for an entry whose filesystem fails
// every statx (shut down, its server gone). Kernels before 6.12 refuse
// the flag with EINVAL.
func nameToHandleMountID(fd int, name string) (uint64, error) {
	p, err := unix.BytePtrFromString(name)
	if err != nil {
		return 0, err
	}
	// struct file_handle: handle_bytes, handle_type, then the handle.
	var fh struct {
		bytes  uint32
		typ    int32
		handle [maxHandleSize]byte
	}
	fh.bytes = maxHandleSize
	var id uint64
	_, _, errno := unix.Syscall6(unix.SYS_NAME_TO_HANDLE_AT, uintptr(fd), uintptr(unsafe.Pointer(p)),
		uintptr(unsafe.Pointer(&fh)), uintptr(unsafe.Pointer(&id)), atHandleFID|atHandleMntIDUnique, 0)
	if errno != 0 {
		return 0, errno
	}
	return id, nil
}
