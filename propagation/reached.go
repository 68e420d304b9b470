// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package propagation

import (
	"fmt"
	"os"
)

// Ident is a file's identity: its device and inode.
type Ident struct{ Dev, Ino uint64 }

// Launcher says where to look at a launcher's hotplug-disks from inside
// the launcher: through which processes, and at which path their
// containers mount it.
type Launcher struct {
	// Proc is the host's procfs, "/proc".
	Proc string
	// Pids are processes of the launcher pod, in any of its containers.
	Pids []int
	// Dir is the path of hotplug-disks inside the container that mounts
	// it (KubeVirt's compute container).
	Dir string
	// DirIdent is the host's hotplug-disks directory: a process whose Dir
	// is anything else does not mount the emptyDir (another container, or
	// the pod's sandbox) and is passed over.
	DirIdent Ident
}

// Sight is what a launcher sees of one target.
type Sight int

const (
	// NoView: no process of the launcher mounts its hotplug-disks, so
	// nothing can be told (the containers are starting or restarting).
	NoView Sight = iota
	// Seen: the launcher sees the file the host mounted.
	Seen
	// NotSeen: the launcher mounts hotplug-disks but sees something else
	// under the target's name (the empty file under the host's mount):
	// the mount did not propagate into the launcher.
	NotSeen
)

// NotSeenError says that a mount made on the host is not what the
// launcher sees, with what it sees instead and the likely cause.
type NotSeenError struct {
	Name      string
	Pid       int
	Want, Got Ident
	GotErr    error
}

func (e *NotSeenError) Error() string {
	got := e.Got.String()
	if e.GotErr != nil {
		got = e.GotErr.Error()
	}
	return fmt.Sprintf("the launcher (pid %d) does not see the mount on %q: it sees %s, the host mounted %s; "+
		"its view of hotplug-disks is not a slave of the host mount (a launcher started before the kubelet's pods "+
		"directory was made rshared, or without mountPropagation: HostToContainer): restart the launcher pod (migrate the VM)",
		e.Pid, e.Name, got, e.Want)
}

// Bound is a bind a launcher's mount namespace has on a target: the mount
// there and the file it binds. The mount is named by the id statx reports
// for it: on Linux ≥ 6.8 the unique id, never reused while the system
// runs; before, the id mountinfo shows, reused only once the mount is
// freed. Either names that mount for as long as a descriptor on it keeps
// it alive, detached or not.
type Bound struct {
	Mount uint64
	File  Ident
}

// Reached tells whether the launcher sees, under name in its
// hotplug-disks, the file want (the host's bind target, i.e. disk.img's
// identity). Every process of the launcher that mounts hotplug-disks is
// asked, one per mount namespace; one that sees want is enough. NotSeen
// comes with a *NotSeenError. It also returns the bind of each namespace
// that sees want, which a caller keeps to recognise QEMU's descriptor of
// this disk.img once the bind is replaced (Current.Former).
func Reached(l Launcher, name string, want Ident) (Sight, []Bound, error) {
	return reached(l, name, want)
}

// IdentOf is the identity of an open file, for Launcher.DirIdent and
// Reached's want.
func IdentOf(f *os.File) (Ident, error) { return identOf(f) }

// TargetIdent is the identity of what a lookup of target in hotplugDir
// (relative to kubeletRoot, symlinks refused) reaches: for a file bind,
// the disk.img that QEMU should hold (Current.File), found the way Check
// finds the host's side. Call it in the host mount namespace.
func TargetIdent(kubeletRoot, hotplugDir, target string) (Ident, error) {
	return targetIdent(kubeletRoot, hotplugDir, target)
}
