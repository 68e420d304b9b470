// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package sandbox

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"

	"golang.org/x/sys/unix"
)

// HangingFS is a storage backend that stops answering: a FUSE filesystem
// served by this process (the simulated node publishes it like a CSI
// filesystem volume; node's tests mount it under a volume). Its root
// holds one file, disk.img (1 MiB, read as zeros: nothing reads it), whose
// attributes the kernel caches for no time at all, so every full stat asks
// the server. Until Hang it answers what a bind of disk.img needs (lookup,
// getattr, setattr for the chown); after, it reads requests and answers
// none, as a FUSE daemon or a hard-mounted NFS server that is gone. A
// thread waiting on it is in the kernel's killable wait. Only the kernel's
// FUSE client is used, no library: the protocol is the few fixed structs of
// <linux/fuse.h> below.
type HangingFS struct {
	dev       *os.File
	dir       string
	hung      atomic.Bool
	stopping  atomic.Bool
	mu        sync.Mutex
	uid, gid  uint32 // disk.img's owner, as setattr left it
	done      chan struct{}
	closeOnce sync.Once
}

// FUSE opcodes and sizes (include/uapi/linux/fuse.h).
const (
	fuseLookup  = 1
	fuseForget  = 2
	fuseGetattr = 3
	fuseSetattr = 4
	fuseInit    = 26
	fuseIntr    = 36 // INTERRUPT
	fuseBatch   = 42 // BATCH_FORGET
	fuseInHdr   = 40
	fuseAttrLen = 88
	fattrUID    = 1 << 1
	fattrGID    = 1 << 2
	imgNode     = 2
	imgBytes    = 1 << 20
)

// MountHangingFS mounts a HangingFS on dir, creating dir, and serves it
// until Abort; unmounting dir is the caller's.
func MountHangingFS(dir string) (*HangingFS, error) {
	if err := os.MkdirAll(dir, 0o750); err != nil {
		return nil, err
	}
	dev, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		return nil, fmt.Errorf("open /dev/fuse: %w", err)
	}
	opts := fmt.Sprintf("fd=%d,rootmode=40755,user_id=0,group_id=0,allow_other", dev.Fd())
	if err := unix.Mount("hpmount-hanging-fuse", dir, "fuse", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		dev.Close()
		return nil, fmt.Errorf("mount fuse on %q: %w", dir, err)
	}
	fs := &HangingFS{dev: dev, dir: dir, done: make(chan struct{})}
	go fs.serve()
	return fs, nil
}

// Hang makes the server answer nothing from now on.
func (fs *HangingFS) Hang() { fs.hung.Store(true) }

// Abort ends the connection: every request still waiting fails with
// ENOTCONN, as does every later one. The device is released only once the
// server's read returns, so a request (a stat of the root, failing with
// the rest) wakes the server first.
func (fs *HangingFS) Abort() {
	fs.closeOnce.Do(func() {
		fs.stopping.Store(true)
		go func() {
			var st unix.Stat_t
			_ = unix.Stat(fs.dir, &st)
		}()
		<-fs.done
		fs.dev.Close()
	})
}

func (fs *HangingFS) serve() {
	defer close(fs.done)
	buf := make([]byte, 1<<20+4096)
	for {
		n, err := unix.Read(int(fs.dev.Fd()), buf)
		if errors.Is(err, unix.EINTR) || errors.Is(err, unix.ENOENT) {
			continue // an interrupted request
		}
		if err != nil || n < fuseInHdr || fs.stopping.Load() {
			return // aborted, unmounted or ending
		}
		op := binary.LittleEndian.Uint32(buf[4:])
		unique := binary.LittleEndian.Uint64(buf[8:])
		node := binary.LittleEndian.Uint64(buf[16:])
		in := buf[fuseInHdr:n]
		switch {
		case op == fuseForget || op == fuseBatch || op == fuseIntr:
			// No answer is expected.
		case fs.hung.Load():
			// Never answered.
		default:
			out, errno := fs.answer(op, node, in)
			fs.reply(unique, out, errno)
		}
	}
}

func (fs *HangingFS) answer(op uint32, node uint64, in []byte) ([]byte, unix.Errno) {
	switch op {
	case fuseInit:
		out := make([]byte, 64)
		binary.LittleEndian.PutUint32(out[0:], 7)   // major
		binary.LittleEndian.PutUint32(out[4:], 28)  // minor
		copy(out[8:12], in[8:12])                   // max_readahead
		binary.LittleEndian.PutUint16(out[16:], 16) // max_background
		binary.LittleEndian.PutUint16(out[18:], 12) // congestion_threshold
		binary.LittleEndian.PutUint32(out[20:], 4096)
		binary.LittleEndian.PutUint32(out[24:], 1) // time_gran
		return out, 0
	case fuseLookup:
		if node != 1 || string(in[:max(0, len(in)-1)]) != "disk.img" {
			return nil, unix.ENOENT
		}
		out := make([]byte, 40+fuseAttrLen) // fuse_entry_out
		binary.LittleEndian.PutUint64(out[0:], imgNode)
		binary.LittleEndian.PutUint64(out[8:], 1)     // generation
		binary.LittleEndian.PutUint64(out[16:], 3600) // entry_valid; attr_valid stays 0
		fs.attr(out[40:], imgNode)
		return out, 0
	case fuseSetattr:
		valid := binary.LittleEndian.Uint32(in[0:])
		fs.mu.Lock()
		if valid&fattrUID != 0 {
			fs.uid = binary.LittleEndian.Uint32(in[76:])
		}
		if valid&fattrGID != 0 {
			fs.gid = binary.LittleEndian.Uint32(in[80:])
		}
		fs.mu.Unlock()
		fallthrough
	case fuseGetattr:
		out := make([]byte, 16+fuseAttrLen) // fuse_attr_out, attr_valid 0
		fs.attr(out[16:], node)
		return out, 0
	}
	return nil, unix.ENOSYS
}

// attr writes the fuse_attr of node: the root directory or disk.img.
func (fs *HangingFS) attr(b []byte, node uint64) {
	binary.LittleEndian.PutUint64(b[0:], node) // ino
	mode, nlink := uint32(unix.S_IFDIR|0o755), uint32(2)
	if node == imgNode {
		mode, nlink = unix.S_IFREG|0o644, 1
		binary.LittleEndian.PutUint64(b[8:], imgBytes) // size
		fs.mu.Lock()
		binary.LittleEndian.PutUint32(b[68:], fs.uid)
		binary.LittleEndian.PutUint32(b[72:], fs.gid)
		fs.mu.Unlock()
	}
	binary.LittleEndian.PutUint32(b[60:], mode)
	binary.LittleEndian.PutUint32(b[64:], nlink)
	binary.LittleEndian.PutUint32(b[80:], 4096) // blksize
}

func (fs *HangingFS) reply(unique uint64, out []byte, errno unix.Errno) {
	if errno != 0 {
		out = nil
	}
	msg := make([]byte, 16+len(out))
	binary.LittleEndian.PutUint32(msg[0:], uint32(len(msg)))
	binary.LittleEndian.PutUint32(msg[4:], uint32(-int32(errno)))
	binary.LittleEndian.PutUint64(msg[8:], unique)
	copy(msg[16:], out)
	_, _ = unix.Write(int(fs.dev.Fd()), msg)
}
