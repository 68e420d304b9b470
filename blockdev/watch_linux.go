// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package blockdev

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Watch returns a watch of the device programs attached to the
// container's cgroup and each descendant: their IDs change whenever any
// writer replaces one (Allow too), and only then.
func (v *V2) Watch(c Container) (RuleWatch, error) {
	ctr, err := v.pods.Container(v.root, c.PodUID, c.ID)
	if err != nil {
		return nil, err
	}
	return newStampWatch(ctr.TopDown(), func(dir string) (string, int) {
		return dir, unix.O_RDONLY | unix.O_DIRECTORY
	}, programStamp)
}

// Watch returns a watch of the devices.list of the container's cgroup and
// each descendant.
func (v *V1) Watch(c Container) (RuleWatch, error) {
	ctr, err := v.pods.Container(v.root, c.PodUID, c.ID)
	if err != nil {
		return nil, err
	}
	return newStampWatch(ctr.TopDown(), func(dir string) (string, int) {
		return filepath.Join(dir, "devices.list"), unix.O_RDONLY
	}, listStamp)
}

// stampWatch compares, per cgroup, a stamp of its device rules with the
// one it read last. It keeps each cgroup's file open, so that one ask is
// one syscall per cgroup: the engine asks every launcher's twice a second.
type stampWatch struct {
	files []*os.File
	last  [][]byte
	// spare is the buffer the next stamp is read into: each read swaps
	// it with the one it replaces, so asking allocates nothing.
	spare []byte
	// read: last holds a first reading (a stamp can be empty).
	read  bool
	stamp func(f *os.File, buf []byte) ([]byte, error)
}

func newStampWatch(dirs []string, open func(dir string) (string, int), stamp func(*os.File, []byte) ([]byte, error)) (*stampWatch, error) {
	w := &stampWatch{stamp: stamp, last: make([][]byte, len(dirs))}
	for _, dir := range dirs {
		path, flags := open(dir)
		fd, err := unix.Open(path, flags|unix.O_CLOEXEC, 0)
		if err != nil {
			w.Close()
			return nil, fmt.Errorf("open %q: %w", path, err)
		}
		w.files = append(w.files, os.NewFile(uintptr(fd), path))
	}
	if _, err := w.Changed(); err != nil {
		w.Close()
		return nil, err
	}
	return w, nil
}

// Changed reads every cgroup's stamp; all are read even after the first
// difference, so that the next call compares with what is there now.
func (w *stampWatch) Changed() (bool, error) {
	changed := false
	for i, f := range w.files {
		s, err := w.stamp(f, w.spare)
		if err != nil {
			return false, err
		}
		changed = changed || w.read && !bytes.Equal(s, w.last[i])
		w.spare, w.last[i] = w.last[i], s
	}
	w.read = true
	return changed, nil
}

// Close closes the watched cgroups' files.
func (w *stampWatch) Close() error {
	var errs []error
	for _, f := range w.files {
		errs = append(errs, f.Close())
	}
	w.files = nil
	return errors.Join(errs...)
}

// programStamp is the IDs of the device programs attached to the cgroup
// itself, into buf: a program is never changed in place, only replaced by
// one with a new ID.
func programStamp(f *os.File, buf []byte) ([]byte, error) {
	buf = buf[:0]
	_, ids, err := queryDevicePrograms(int(f.Fd()), 0)
	if err != nil {
		return nil, fmt.Errorf("cgroup %q: %w", f.Name(), err)
	}
	for _, id := range ids {
		buf = binary.LittleEndian.AppendUint32(buf, uint32(id))
	}
	return buf, nil
}

// listStamp is the cgroup's devices.list as the kernel prints it, read
// again from its start into buf, grown until the whole list fits.
func listStamp(f *os.File, buf []byte) ([]byte, error) {
	buf = buf[:cap(buf)]
	if len(buf) < 512 {
		// A container's list is a few lines; every watched cgroup
		// keeps two such buffers.
		buf = make([]byte, 512)
	}
	for {
		n, err := unix.Pread(int(f.Fd()), buf, 0)
		if err != nil {
			return nil, fmt.Errorf("read device cgroup list %q: %w", f.Name(), err)
		}
		if n < len(buf) {
			return buf[:n], nil
		}
		buf = make([]byte, 2*len(buf))
	}
}
