// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package isolation

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// ErrUnsafePath marks a refusal: the path crossed a symlink, left its root,
// crossed a mount where that is not allowed, or named something malformed.
// Callers count refusals with errors.Is(err, ErrUnsafePath).
var ErrUnsafePath = errors.New("unsafe path")

// ErrStuck is wrapped when a call in a mount namespace did not finish
// within its timeout and was abandoned (see MountNamespace.Do).
var ErrStuck = errors.New("call in the mount namespace is stuck")

// StuckCall is a call abandoned past its deadline that has not returned
// yet (MountNamespace.StuckCalls).
type StuckCall struct {
	// Since is when the call started.
	Since time.Time
	// TID is the thread that runs it.
	TID int
	// State is the thread's state letter as /proc shows it ('R' running,
	// 'S' interruptible sleep, 'D' uninterruptible sleep, ...); 0 when it
	// could not be read.
	State byte
}

// Uninterruptible reports a thread asleep in the kernel where no signal
// reaches it ('D': I/O on a frozen filesystem, a disk that does not
// answer). Such a thread keeps the process from exiting until the wait
// ends, so killing the process frees nothing: the restarted process waits
// for the same thread to leave first.
func (c StuckCall) Uninterruptible() bool { return c.State == 'D' }

// ErrClosed is returned by MountNamespace.Do after Close.
var ErrClosed = errors.New("mount namespace runner is closed")

// How says how OpenBeneath opens the last component.
type How struct {
	// Flags are open(2) flags for the last component; O_NOFOLLOW and
	// O_CLOEXEC are always added.
	Flags int
	// Mode is the permission for O_CREAT.
	Mode uint32
	// SameMount refuses a path that crosses a mount point below the root,
	// e.g. a disk.img that is itself a bind mount of a host file.
	SameMount bool
}

// FdPath names an open file through procfs. Handing this path to a syscall
// reaches exactly the object behind f, whatever happens to its name meanwhile.
func FdPath(f *os.File) string {
	return "/proc/self/fd/" + strconv.Itoa(int(f.Fd()))
}

// Host locates the host's mount namespace and mount table through a host
// process: <Proc>/<PID>/ns/mnt and <Proc>/<PID>/mountinfo. The agent runs
// with hostPID and reads them through PID 1; tests point them at their own
// namespace.
type Host struct {
	// Proc is the host's procfs, e.g. /proc.
	Proc string
	// PID is a process of the host's mount namespace, normally 1.
	PID int
}

// DefaultHost is PID 1 in /proc.
var DefaultHost = Host{Proc: "/proc", PID: 1}

// MountNamespace is the path of the host's mount namespace file.
func (h Host) MountNamespace() string {
	return filepath.Join(h.Proc, strconv.Itoa(h.PID), "ns", "mnt")
}

// MountInfo is the path of the host's mount table.
func (h Host) MountInfo() string {
	return filepath.Join(h.Proc, strconv.Itoa(h.PID), "mountinfo")
}

// Validate reports a Proc that is not absolute or a PID that is not one.
func (h Host) Validate() error {
	if !filepath.IsAbs(h.Proc) {
		return fmt.Errorf("host proc %q is not an absolute path", h.Proc)
	}
	if h.PID <= 0 {
		return fmt.Errorf("host pid %d is not a process id", h.PID)
	}
	return nil
}
