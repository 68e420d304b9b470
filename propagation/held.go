// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package propagation

import (
	"errors"
	"path"
	"strings"
)

// ErrTooManyProcesses is wrapped by Held when the launcher pod runs more
// processes than it looks at: what QEMU holds is then unknown, not "no
// QEMU".
var ErrTooManyProcesses = errors.New("the launcher pod runs too many processes to look for QEMU")

// qemuExecutable tells whether exe, the path of a process's executable
// (/proc/<pid>/exe), is QEMU's: named qemu-kvm (KubeVirt's virt-launcher
// image runs /usr/libexec/qemu-kvm) or qemu-system-<arch>, the names
// KubeVirt itself looks for.
func qemuExecutable(exe string) bool {
	name := path.Base(exe)
	return name == "qemu-kvm" || strings.HasPrefix(name, "qemu-system-")
}

// Hold is what a launcher's QEMU holds of one entry of its hotplug-disks.
type Hold int

const (
	// NoQEMU: no process of the launcher pod is QEMU (the VM is not
	// running, or the pod's cgroup cannot be found).
	NoQEMU Hold = iota
	// NotOpen: QEMU runs but holds nothing under the entry's name: the
	// disk is not attached to the domain (yet).
	NotOpen
	// Open: QEMU holds the volume's current file or device.
	Open
	// StaleOpen: QEMU holds a file or device under the entry's name that
	// is no longer the volume's (it was replaced after QEMU opened it).
	StaleOpen
)

// Current is what an entry of hotplug-disks is now, to compare with what
// QEMU holds: the identity of the file bound there (a filesystem volume's
// disk.img), or, for a block volume, the device number it publishes.
type Current struct {
	File   Ident
	Device uint64
	Block  bool
	// Former are binds the launcher had on a filesystem volume's target
	// before (Look.Binds, kept by the caller). Once a bind is replaced,
	// its mount is detached under QEMU's descriptor, whose link then names
	// no path in hotplug-disks (it reads "/"): only the descriptor's
	// mount and file, both those of a former bind, tie it to the volume.
	Former []Bound
}

// Held tells what the QEMU process of launcher (its pod UID) holds open of
// name in its hotplug-disks (a target name: "<vol>.img" or "<vol>"),
// compared with cur. QEMU is a process of the pod whose executable
// (/proc/<pid>/exe, not its settable command name) is named qemu-kvm or
// qemu-system-<arch>, among all of the pod's processes: a pod with more
// than Held looks at is an error wrapping ErrTooManyProcesses, never
// NoQEMU. Its descriptors are read
// through <Proc>/<pid>/fd, whose links spell the path as the process sees
// it; those ending in the last two components of Dir and name
// (".../kubevirt/hotplug-disks/<name>") are compared, and so is one that
// names nothing in hotplug-disks yet is on the mount of one of cur.Former
// and holds its file: a descriptor is the volume's only by those facts,
// never by a likeness. The detail says what was found, for a person. Held
// only reads /proc and never touches the process.
func (v LauncherView) Held(launcher, name string, cur Current) (Hold, string, error) {
	return v.held(launcher, name, cur)
}
