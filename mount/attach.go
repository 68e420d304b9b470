// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/mountinfo"
	"github.com/hpmount/hpmount/outcome"
)

// Filesystem-mode attach: the file disk.img that the kubelet published for
// the attachment pod is bind-mounted onto a target file in the launcher's
// hotplug-disks emptyDir, under the name the caller gives (the kubelet
// package names it: <volume>.img), in the host mount namespace. Every path
// is resolved beneath the kubelet root with symlinks refused and then used
// only through its file descriptor. The calls are idempotent: the kernel's mount table (a
// Table read once per batch) and the fds decide what is there, and a target
// that already carries the right mount is left alone without a syscall that
// changes anything.

// DefaultQEMUID is the uid and gid QEMU runs as in virt-launcher; the mounted
// file is given to it.
const DefaultQEMUID = 107

// Attacher bind-mounts filesystem-mode volumes into launcher pods.
type Attacher struct {
	// NS is the host mount namespace; every step runs inside it. nil runs
	// in the caller's own namespace (tests, or an agent already there).
	NS *isolation.MountNamespace
	// KubeletRoot is the kubelet root directory as the host sees it:
	// absolute, with symlinks already resolved, since mount points in the
	// host's mountinfo are spelled that way.
	KubeletRoot string
	// UID and GID own the mounted file; 0 means DefaultQEMUID.
	UID, GID int
	// SysRoot is sysfs, for checking that a mount's block device still
	// exists; "" means "/sys".
	SysRoot string
	// BeforeChange, when set, runs on the call's thread right before each
	// change an attach, detach or disk image creation makes, with the
	// step's name ("create target", "unmount", "bind", "chown", ...), and
	// before the call checks that its caller still waits for it. It is a
	// seam for tests, which hold a call there to give it up at a chosen
	// step.
	BeforeChange func(step string)

	// opened is the launcher directory a WithLauncherDir copy holds.
	opened *openedDir
}

// Observed is one target found in a hotplug-disks directory.
type Observed struct {
	// Name is the target's name in the directory, as the Lister listed
	// it (for a file bind kubelet.TargetName of the volume).
	Name string
	// Mounted reports whether anything is mounted on the file.
	Mounted bool
	// Stacked reports more than one mount on the file, which the agent
	// never makes and Attach peels down to one.
	Stacked bool
	// Depth is the number of mounts on the file (0 when not mounted).
	Depth int
	// MountID is the id of the top mount, 0 when not mounted.
	MountID int
	// Dev is the top mount's device "MAJ:MIN", Root the path inside that
	// filesystem that is mounted (e.g. "/disk.img"); empty when not
	// mounted. Root is empty too when the mount is newer than the Table.
	Dev, Root string
	// SourceGone reports that the mounted file was deleted from its
	// filesystem or that the mount's block device no longer exists.
	SourceGone bool
}

// ValidTarget refuses a target name that is not one plain file name in
// hotplug-disks (isolation.ValidName): the caller names the target, mount
// only checks it. Package grow checks the targets it grows by it too.
func ValidTarget(name string) error {
	return isolation.ValidName("target name", name, isolation.MaxNameLen)
}

func (a *Attacher) qemuIDs() (uid, gid int) {
	uid, gid = a.UID, a.GID
	if uid == 0 {
		uid = DefaultQEMUID
	}
	if gid == 0 {
		gid = DefaultQEMUID
	}
	return uid, gid
}

func (a *Attacher) sysRoot() string {
	if a.SysRoot == "" {
		return "/sys"
	}
	return a.SysRoot
}

// steps is what a call in the host namespace asks before each change it
// makes: whether its caller still waits for it (isolation.Live). A call
// given up past its deadline still runs on its written-off thread, and its
// caller may have detached the volume since, or started a replacement call
// on the same target: it must change nothing more.
type steps struct {
	live *isolation.Live
	hook func(step string) // Attacher.BeforeChange
}

// next returns nil when the call may go on to the change named by step,
// and an error wrapping isolation.ErrAbandoned once its caller gave up.
func (s steps) next(step string) error {
	if s.hook != nil {
		s.hook(step)
	}
	if err := s.live.Check(); err != nil {
		return fmt.Errorf("%s: %w", step, err)
	}
	return nil
}

// inHost runs fn in a's host namespace (isolation.CallLive), or here when
// NS is nil, handing it the steps to check before each change.
func inHost[T any](a *Attacher, fn func(s steps) (T, error)) (T, error) {
	if a.NS == nil {
		return fn(steps{hook: a.BeforeChange})
	}
	return isolation.CallLive(a.NS, func(l *isolation.Live) (T, error) { return fn(steps{l, a.BeforeChange}) })
}

// Attach bind-mounts sourceDir/disk.img onto targetDir/file, both
// relative to KubeletRoot: sourceDir is the volume directory
// kubelet.FindPublished returned, targetDir the launcher's
// pods/<L>/volumes/kubernetes.io~empty-dir/hotplug-disks, and file the
// target's name there (kubelet.TargetName), which must be one plain file
// name (isolation.ValidName).
//
// disk.img must be a regular file with a single link on the volume
// directory's own mount; the target directory and an existing target must
// not be symlinks, and the target must be a regular file. Refusals wrap
// isolation.ErrUnsafePath and change nothing. A target already carrying
// exactly one mount of this disk.img is left alone (Unchanged; only its
// owner is corrected if it differs). Mounts from another or a deleted source,
// and stacked mounts, are unmounted and the source mounted once (Replaced).
// The mounted file is then owned by UID:GID. disk.img is never written,
// truncated or removed.
//
// t is the host's mount table, read once for the batch; Attach reads no
// mountinfo itself.
func (a *Attacher) Attach(t *mountinfo.Table, sourceDir, targetDir, file string) (outcome.Result, error) {
	return a.attach(t, sourceDir, targetDir, file)
}

// Image is a published disk.img as Attach checks it, and where the mount
// table has it.
type Image struct {
	// Size is disk.img's size in bytes.
	Size int64
	// Mount is the mount of the volume directory, nil when the table does
	// not have it; Root is disk.img's path inside Mount's filesystem, as
	// mountinfo shows a bind of it ("/disk.img"), "" when unknown.
	Mount *mountinfo.Info
	Root  string
}

// CheckImage applies Attach's checks of sourceDir/disk.img (regular file,
// one link, on the volume's own mount, reached without a symlink) without
// mounting anything, and finds the image in t (nil: nowhere). A refusal
// wraps isolation.ErrUnsafePath. diag uses it, so that it judges a volume
// by exactly the agent's rule.
func (a *Attacher) CheckImage(t *mountinfo.Table, sourceDir string) (Image, error) {
	return a.checkImage(t, sourceDir)
}

// Shows reports whether m, the top mount on a target, is by the table a
// live bind of the image: not deleted, of the image's device, at its root.
// What the table does not know of the image is not held against m. It is
// Attach's sameness (beside the inode the target shows), and diag's.
func (im Image) Shows(m *mountinfo.Info) bool {
	if m.Deleted() {
		return false
	}
	if im.Mount != nil && (m.Major != im.Mount.Major || m.Minor != im.Mount.Minor) {
		return false
	}
	return im.Root == "" || m.Root == im.Root
}

// CheckTarget looks at targetDir/file, a file volume's target, as Attach
// does before it changes anything, and changes nothing: a target that is
// not a regular file wraps isolation.ErrUnsafePath. A missing target is
// no error. diag judges a target's kind by it.
func (a *Attacher) CheckTarget(t *mountinfo.Table, targetDir, file string) error {
	return a.checkTarget(t, targetDir, file, false)
}

// CheckDirTarget is CheckTarget of a directory volume's target, by
// AttachDir's rule: a target that is not a directory, or an unmounted
// directory the agent cannot have left (with content, or not owned by
// root), wraps isolation.ErrUnsafePath.
func (a *Attacher) CheckDirTarget(t *mountinfo.Table, targetDir, file string) error {
	return a.checkTarget(t, targetDir, file, true)
}

// Detach unmounts everything mounted on targetDir/file (lazily when a
// mount is busy) and then unlinks the file, provided it is a regular file
// once nothing is mounted on it. A missing target, or a missing targetDir,
// is success (Unchanged).
func (a *Attacher) Detach(t *mountinfo.Table, targetDir, file string) (outcome.Result, error) {
	return a.detach(t, targetDir, file)
}

// Lister lists the entries of an opened hotplug-disks directory that its
// caller names as targets of one kind, sorted by name: mount makes and
// reads the targets it is told of and derives no name itself.
// kubelet.ReadFileTargets and kubelet.ReadDirTargets are the listers.
type Lister func(dir *os.File) ([]fs.DirEntry, error)

// Observe lists the regular files among the entries list returns for
// targetDir (relative to KubeletRoot), with what is mounted on each. A
// missing targetDir has no entries and is not an error.
func (a *Attacher) Observe(t *mountinfo.Table, targetDir string, list Lister) ([]Observed, error) {
	return a.observe(t, targetDir, list)
}

// DeadSource reports an error that means the filesystem behind a mount is
// gone (EIO, ESTALE, ENOTCONN, EHOSTDOWN, ENXIO, ENODEV: shut down after an
// error, its device or storage server gone), not that the mount is: it can
// still be unmounted. diag's dead-source verdict uses the same rule.
func DeadSource(err error) bool { return deadSource(err) }

// BlockDeviceGone reports that the block device major:minor no longer
// exists: sysRoot/dev/block/MAJ:MIN is missing. Any other failure of the
// look says nothing, so it is not taken as gone. It is the one rule for
// Observed.SourceGone and for diag's judgement of a block node.
func BlockDeviceGone(sysRoot string, major, minor uint32) bool {
	_, err := os.Lstat(filepath.Join(sysRoot, "dev", "block", fmt.Sprintf("%d:%d", major, minor)))
	return errors.Is(err, fs.ErrNotExist)
}
