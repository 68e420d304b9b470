// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mountwatch

// The kernel ABI golang.org/x/sys/unix does not define (it has the
// FAN_* and STATMOUNT-less constants, SYS_STATMOUNT, SYS_LISTMOUNT and
// NS_GET_MNTNS_ID). Checked against include/uapi/linux/fanotify.h and
// include/uapi/linux/mount.h; abi_linux_test.go holds sizes and offsets.

// fanotifyEventInfoHeader is struct fanotify_event_info_header.
type fanotifyEventInfoHeader struct {
	InfoType uint8
	Pad      uint8
	Len      uint16
}

// fanotifyEventInfoMnt is struct fanotify_event_info_mnt: the record a
// FAN_REPORT_MNT group's events carry, info type FAN_EVENT_INFO_TYPE_MNT.
// The padding is spelled out: encoding/binary packs fields, the C
// compiler aligns mnt_id to 8.
type fanotifyEventInfoMnt struct {
	Hdr   fanotifyEventInfoHeader
	_     uint32
	MntID uint64
}

// mntIDReq is struct mnt_id_req of statmount(2) and listmount(2), version
// 1 (MNT_ID_REQ_SIZE_VER1, Linux ≥ 6.11): MntNsID names the namespace to
// look in, which need not be the caller's.
type mntIDReq struct {
	Size    uint32
	Spare   uint32
	MntID   uint64
	Param   uint64
	MntNsID uint64
}

// statmountFixed is the fixed part of struct statmount; the strings
// follow it, Str bytes in, at the offsets its [str] fields give.
type statmountFixed struct {
	Size           uint32
	MntOpts        uint32
	Mask           uint64
	SbDevMajor     uint32
	SbDevMinor     uint32
	SbMagic        uint64
	SbFlags        uint32
	FsType         uint32
	MntID          uint64
	MntParentID    uint64
	MntIDOld       uint32
	MntParentIDOld uint32
	MntAttr        uint64
	MntPropagation uint64
	MntPeerGroup   uint64
	MntMaster      uint64
	PropagateFrom  uint64
	MntRoot        uint32
	MntPoint       uint32
	MntNsID        uint64
	Spare2         [49]uint64
}

const (
	// statmountMntBasic asks for mnt_id and mnt_id_old; statmountMntPoint
	// for the mount point, relative to the root of the namespace asked
	// (the caller's root in its own).
	statmountMntBasic = 0x2
	statmountMntPoint = 0x10
	// lsmtRoot asks listmount(2) for every mount of the namespace.
	lsmtRoot = ^uint64(0)
	// mntIDReqSizeVer1 is sizeof(struct mnt_id_req) with mnt_ns_id.
	mntIDReqSizeVer1 = 32
	// statmountStr is where struct statmount's str[] begins.
	statmountStr = 512
	// fanotifyInfoMntSize is sizeof(struct fanotify_event_info_mnt).
	fanotifyInfoMntSize = 16
)
