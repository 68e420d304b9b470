// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/mountinfo"
	"github.com/hpmount/hpmount/outcome"
)

// openTreeMissing is set once the kernel has said it has no open_tree (before
// 5.2), so later binds go straight to mount(2). Tests set it to cover both.
var openTreeMissing atomic.Bool

// mountSetattr is mount_setattr(2); tests make it fail with ENOSYS to
// cover kernels 5.2 to 5.11, which have open_tree but not it.
var mountSetattr = unix.MountSetattr

// maxPeel bounds the unmounts of one target: a stack deeper than this is not
// something the agent made, and an endless loop must not hide it.
const maxPeel = 32

// diskImage is the file a filesystem-mode PVC holds for KubeVirt.
const diskImage = "disk.img"

// source is a validated disk.img, held open as O_PATH.
type source struct {
	f  *os.File
	st unix.Stat_t
	// vol is the mount of the volume directory, nil when the table does
	// not know it (a table from before the volume was published).
	vol *mountinfo.Info
	// root is the path of disk.img inside its filesystem, as mountinfo
	// shows it for a bind of it (e.g. "/disk.img"); "" when unknown.
	root string
}

// target is what lookup of the target name in hotplug-disks reaches.
type target struct {
	exists  bool
	mounted bool
	// top is the mount on the file, nil when not mounted or newer than
	// the table; depth is the number of mounts stacked there, 0 when
	// unknown.
	top   *mountinfo.Info
	depth int
	id    uint64
	st    unix.Stat_t
	// dead: the filesystem mounted on the file answers nothing but I/O
	// errors (shut down, its device or server gone); what is known of it
	// comes from the table.
	dead bool
}

func deadSource(err error) bool {
	for _, e := range []error{unix.EIO, unix.ESTALE, unix.ENOTCONN, unix.EHOSTDOWN, unix.ENXIO, unix.ENODEV} {
		if errors.Is(err, e) {
			return true
		}
	}
	return false
}

func (a *Attacher) attach(t *mountinfo.Table, sourceDir, targetDir, file string) (outcome.Result, error) {
	if err := ValidTarget(file); err != nil {
		return "", fmt.Errorf("attach to %q: %w", filepath.Join(a.KubeletRoot, targetDir), err)
	}
	return inHost(a, func(s steps) (outcome.Result, error) { return a.attachHere(s, t, sourceDir, targetDir, file) })
}

func (a *Attacher) checkImage(t *mountinfo.Table, sourceDir string) (Image, error) {
	return inHost(a, func(steps) (Image, error) {
		root, err := openKubeletRoot(a.KubeletRoot)
		if err != nil {
			return Image{}, err
		}
		defer root.Close()
		src, err := a.openSource(t, root, sourceDir)
		if err != nil {
			return Image{}, err
		}
		src.f.Close()
		return src.image(), nil
	})
}

// checkTarget looks at the target as attach's look does (inspectTarget,
// or inspectDirTarget for a directory) and keeps only its verdict.
func (a *Attacher) checkTarget(t *mountinfo.Table, targetDir, file string, asDir bool) error {
	if err := ValidTarget(file); err != nil {
		return fmt.Errorf("check %q: %w", filepath.Join(a.KubeletRoot, targetDir), err)
	}
	look := inspectTarget
	if asDir {
		look = inspectDirTarget
	}
	_, err := inHost(a, func(steps) (struct{}, error) {
		dir, dirID, err := a.existingTargetDir(t, targetDir)
		if err != nil || dir == nil {
			return struct{}{}, err
		}
		defer dir.Close()
		_, err = look(t, dir, dirID, file)
		return struct{}{}, err
	})
	return err
}

func (a *Attacher) attachHere(s steps, t *mountinfo.Table, sourceDir, targetDir, file string) (outcome.Result, error) {
	return a.attachIn(s, t, targetDir, file, func(root *os.File) (binding, error) {
		src, err := a.openSource(t, root, sourceDir)
		if err != nil {
			return binding{}, err
		}
		return fileBinding(src), nil
	})
}

// fileBinding binds a disk.img onto a regular file.
func fileBinding(src *source) binding {
	return binding{src: src.f, st: src.st, shows: func(tg target) bool { return sameSource(tg, src) },
		look: inspectTarget, create: createTarget, open: openFileToBind}
}

// openSource opens sourceDir/disk.img and checks that it is a plain file of
// the volume: regular, one link (a second name could be a file outside the
// volume, hard-linked in by the tenant), and on the volume directory's own
// mount (not a bind of some host file onto disk.img).
func (a *Attacher) openSource(t *mountinfo.Table, root *os.File, sourceDir string) (*source, error) {
	vol, err := isolation.OpenBeneath(root, sourceDir, isolation.How{Flags: unix.O_PATH | unix.O_DIRECTORY})
	if err != nil {
		return nil, fmt.Errorf("volume directory: %w", err)
	}
	defer vol.Close()
	f, err := isolation.OpenBeneath(vol, diskImage, isolation.How{Flags: unix.O_PATH, SameMount: true})
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("disk image: %w: %w", ErrNoDiskImage, err)
	}
	if err != nil {
		return nil, fmt.Errorf("disk image: %w", err)
	}
	src := &source{f: f}
	fail := func(err error) (*source, error) {
		f.Close()
		return nil, err
	}
	if err := unix.Fstat(int(f.Fd()), &src.st); err != nil {
		return fail(fmt.Errorf("stat disk image %q: %w", f.Name(), err))
	}
	if kind := isolation.FileKind(src.st.Mode); kind != "regular file" {
		return fail(fmt.Errorf("disk image %q: %w: is a %s, not a regular file", f.Name(), isolation.ErrUnsafePath, kind))
	}
	if src.st.Nlink != 1 {
		return fail(fmt.Errorf("disk image %q: %w: has %d hard links, want 1", f.Name(), isolation.ErrUnsafePath, src.st.Nlink))
	}
	volID, err := isolation.MountID(vol)
	if err != nil {
		return fail(err)
	}
	fileID, err := isolation.MountID(f)
	if err != nil {
		return fail(err)
	}
	if volID != fileID {
		return fail(fmt.Errorf("disk image %q: %w: on mount %d, not on the volume's mount %d", f.Name(), isolation.ErrUnsafePath, fileID, volID))
	}
	if t == nil {
		return src, nil
	}
	if src.vol = t.ByID(int(volID)); src.vol != nil {
		src.root = rootOf(src.vol, filepath.Join(a.KubeletRoot, sourceDir, diskImage))
	}
	return src, nil
}

// rootOf is the path inside m's filesystem of hostPath, a path under m's
// mount point; "" if it is not under it.
func rootOf(m *mountinfo.Info, hostPath string) string {
	rel, err := filepath.Rel(m.MountPoint, hostPath)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return ""
	}
	return path.Join(m.Root, rel)
}

// existingTargetDir opens targetDir beneath the kubelet root as
// openTargetDir does. A targetDir that does not exist is no directory and
// no error: there is nothing in it to observe or detach.
func (a *Attacher) existingTargetDir(t *mountinfo.Table, targetDir string) (*os.File, uint64, error) {
	if dir, id, ok := a.opened.again(targetDir); ok {
		return dir, id, nil
	}
	root, err := openKubeletRoot(a.KubeletRoot)
	if err != nil {
		return nil, 0, err
	}
	defer root.Close()
	dir, id, err := openTargetDir(t, root, targetDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, 0, nil
	}
	return dir, id, err
}

// openTarget opens file in dir as O_PATH without following a symlink; a
// lookup that ends on a mount point reaches the top mount.
func openTarget(dir *os.File, file string) (*os.File, error) {
	fd, err := unix.Openat(int(dir.Fd()), file, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	return os.NewFile(uintptr(fd), filepath.Join(dir.Name(), file)), nil
}

// inspectTarget says what is at dir/file. A target that is not a regular
// file is refused.
func inspectTarget(t *mountinfo.Table, dir *os.File, dirID uint64, file string) (target, error) {
	return lookTarget(t, dir, dirID, file, "regular file")
}

// lookAt is what Observe, Attach and Detach need to know of a target: its
// type, links, device, inode and owner (the other fields of the Stat_t
// stay zero). It asks with statx for those fields only and
// AT_STATX_DONT_SYNC: a full fstat asks a network filesystem's server (a
// hard-mounted NFS export) or a FUSE daemon for fresh attributes, and one
// that does not answer would hold every other volume of the launcher,
// which is observed in the same call. Attributes the kernel has cached are
// enough for these fields; a filesystem shut down after an error still
// answers EIO.
func lookAt(f *os.File) (unix.Stat_t, error) {
	var stx unix.Statx_t
	err := unix.Statx(int(f.Fd()), "", unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW|unix.AT_STATX_DONT_SYNC,
		unix.STATX_TYPE|unix.STATX_NLINK|unix.STATX_INO|unix.STATX_UID|unix.STATX_GID, &stx)
	if err != nil {
		return unix.Stat_t{}, err
	}
	var st unix.Stat_t
	st.Dev = as(st.Dev, unix.Mkdev(stx.Dev_major, stx.Dev_minor))
	st.Ino = as(st.Ino, stx.Ino)
	st.Nlink = as(st.Nlink, uint64(stx.Nlink))
	st.Mode = as(st.Mode, uint64(stx.Mode))
	st.Uid, st.Gid = stx.Uid, stx.Gid
	return st, nil
}

// as converts v to the type of field, whose width differs between
// architectures' Stat_t.
func as[T ~uint16 | ~uint32 | ~uint64 | ~int32 | ~int64](field T, v uint64) T { return T(v) }

// stackOn follows parents from mount id down to the mount of the directory
// (dirID) and counts the mounts on the way: one for a plain bind, more for a
// stack. depth is 0 when the table does not reach dirID.
func stackOn(t *mountinfo.Table, id, dirID uint64) (top *mountinfo.Info, depth int) {
	top = t.ByID(int(id))
	for m := top; m != nil; m = t.ByID(m.Parent) {
		if uint64(m.ID) == dirID {
			return top, depth
		}
		depth++
		if depth > t.Len() {
			break
		}
	}
	return top, 0
}

// sameBeneath reports whether the table knows the mount beneath the
// target's top one as a live bind of the same thing: the same device and
// root as the top, which the caller found to be the volume's.
func sameBeneath(t *mountinfo.Table, tg target) bool {
	if tg.top == nil || tg.depth < 2 {
		return false
	}
	b := t.ByID(tg.top.Parent)
	return b != nil && !b.Deleted() && b.Major == tg.top.Major && b.Minor == tg.top.Minor && b.Root == tg.top.Root
}

// peelToOne repairs two binds of the volume, one on the other: the peer
// bound between its look and ours, or we between its look and its bind.
// QEMU may already hold the volume through the top one, and may open it
// at any moment, so only the top is unmounted (its holder keeps the same
// file) and the target never goes without the volume; settle then judges
// what is left, and the result says the target was repaired.
func peelToOne(s steps, t *mountinfo.Table, dir *os.File, tg target, file string, settle func() (outcome.Result, error)) (outcome.Result, error) {
	if _, err := peelTo(s, t, dir, uint64(tg.top.Parent), file); err != nil {
		return "", err
	}
	r, err := settle()
	if r == outcome.Unchanged {
		r = outcome.Replaced
	}
	return r, err
}

// sameSource reports whether the mount on the target is a live bind of
// src's disk.img: the same inode (still linked), and, where the table knows
// both mounts, the same device and root and not deleted.
func sameSource(tg target, src *source) bool {
	if tg.st.Nlink == 0 || tg.st.Dev != src.st.Dev || tg.st.Ino != src.st.Ino {
		return false
	}
	// Newer than the table: the inode is all there is to go by.
	return tg.top == nil || src.image().Shows(tg.top)
}

// image is the checked source as Image says it.
func (src *source) image() Image { return Image{Size: src.st.Size, Mount: src.vol, Root: src.root} }

// claimTarget says what is at the target, as look sees it, creating the
// target when there is nothing. virt-handler's mounter creates the same
// name for the same volume, and may do so between the look and the
// create: the create's EEXIST then sends attach to look again and judge
// what the peer made (an empty target, or its bind already on it) like
// anything else found there. Two looks are enough, since a name that
// exists is never created again.
func claimTarget(look func() (target, error), create func() error) (target, error) {
	tg, err := look()
	if err != nil || tg.exists {
		return tg, err
	}
	err = create()
	if errors.Is(err, unix.EEXIST) {
		return look()
	}
	return tg, err
}

// createTarget makes the empty file to mount on, exclusively: whatever
// appeared there meanwhile is left alone and reported.
func createTarget(s steps, dir *os.File, file string) error {
	where := filepath.Join(dir.Name(), file)
	if err := s.next("create target"); err != nil {
		return fmt.Errorf("create target %q: %w", where, err)
	}
	fd, err := unix.Openat(int(dir.Fd()), file, unix.O_CREAT|unix.O_EXCL|unix.O_NOFOLLOW|unix.O_WRONLY|unix.O_CLOEXEC, 0o660)
	if err != nil {
		return fmt.Errorf("create target %q: %w", where, err)
	}
	defer unix.Close(fd)
	// The umask must not decide the mode QEMU sees before the mount.
	if err := unix.Fchmod(fd, 0o660); err != nil {
		return fmt.Errorf("chmod target %q: %w", where, err)
	}
	return nil
}

// peel unmounts the mounts on dir/file from the top until a lookup reaches
// the file on the directory's own mount, and returns how many it removed.
// The name is resolved from the directory fd, and UMOUNT_NOFOLLOW keeps a
// symlink swapped in for the file from redirecting the unmount.
//
// Another mounter (virt-handler's) may unmount the top mount between the
// look and the unmount; umount2 then fails with EINVAL, as the name no
// longer reaches a mount point. That is not an error: peel looks again, and
// fails only if the mount it aimed at is still the one on top.
func peel(s steps, t *mountinfo.Table, dir *os.File, dirID uint64, file string) (int, error) {
	return peelTo(s, t, dir, dirID, file)
}

// peelTo is peel that stops once a lookup of dir/file reaches the mount
// keep (the directory's own mount, for peel).
func peelTo(s steps, t *mountinfo.Table, dir *os.File, keep uint64, file string) (int, error) {
	where := filepath.Join(dir.Name(), file)
	byFd := isolation.FdPath(dir) + "/" + file
	n := 0
	var vanished uint64 // the mount whose unmount failed with EINVAL
	// Each look removes a mount or sees one vanish, so the looks are
	// bounded too: a mounter that keeps stacking cannot hold peel here.
	for looks := 0; n <= maxPeel && looks <= 2*maxPeel; looks++ {
		f, err := openTarget(dir, file)
		if errors.Is(err, unix.ENOENT) {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("open target %q: %w", where, err)
		}
		id, err := isolation.MountID(f)
		f.Close()
		if err == nil && id == keep {
			return n, nil
		}
		if err := s.next("unmount"); err != nil {
			return n, fmt.Errorf("unmount from %q: %w", where, err)
		}
		if deadSource(err) {
			// The top mount's filesystem is gone: detach it without
			// asking it anything; the lookup of byFd reaches it.
			if err := unix.Unmount(byFd, unix.UMOUNT_NOFOLLOW|unix.MNT_DETACH); err != nil {
				return n, fmt.Errorf("unmount the dead mount on %q: %w", where, err)
			}
			n++
			continue
		}
		if err != nil {
			return n, err
		}
		err = unix.Unmount(byFd, unix.UMOUNT_NOFOLLOW)
		if errors.Is(err, unix.EBUSY) {
			// An open file (QEMU's, in the launcher) pins the mount;
			// detach it lazily, the open file keeps working.
			err = unix.Unmount(byFd, unix.UMOUNT_NOFOLLOW|unix.MNT_DETACH)
		}
		if errors.Is(err, unix.EINVAL) && id != vanished {
			vanished = id
			continue
		}
		if err != nil {
			return n, fmt.Errorf("unmount %s from %q: %w", describeMount(t, id), where, err)
		}
		n++
	}
	if n <= maxPeel {
		return n, fmt.Errorf("unmount %q: its mounts kept vanishing before each unmount", where)
	}
	return n, fmt.Errorf("unmount %q: more than %d mounts stacked", where, maxPeel)
}

func describeMount(t *mountinfo.Table, id uint64) string {
	if m := t.ByID(int(id)); m != nil {
		return fmt.Sprintf("mount %d (%s[%s] %s)", m.ID, m.Source, m.Root, m.Dev())
	}
	return fmt.Sprintf("mount %d", id)
}

// openFileToBind opens dir/file, a regular file, to bind a disk.img onto.
// Only the file is bound: no directory, no recursive bind.
func openFileToBind(dir *os.File, file string) (*os.File, error) {
	tf, err := openTarget(dir, file)
	if err != nil {
		return nil, fmt.Errorf("open target: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(int(tf.Fd()), &st); err != nil {
		tf.Close()
		return nil, err
	}
	if kind := isolation.FileKind(st.Mode); kind != "regular file" {
		tf.Close()
		return nil, fmt.Errorf("%w: target is a %s, not a regular file", isolation.ErrUnsafePath, kind)
	}
	return tf, nil
}

// bindPrivate binds src (a disk.img or a volume directory, held O_PATH)
// onto tf, the target dir/file, never recursively, and leaves the bind out
// of the source's peer group: the one rule of file and directory binds.
// With open_tree the clone is made private while still detached
// (moveMountPrivate); before 5.2 mount(2) binds and the bind is made
// private afterwards (privateAfterBind).
func bindPrivate(src, dir *os.File, file string, tf *os.File) error {
	if !openTreeMissing.Load() {
		err := moveMountPrivate(src, tf)
		if !errors.Is(err, unix.ENOSYS) {
			return err
		}
		openTreeMissing.Store(true)
	}
	if err := unix.Mount(isolation.FdPath(src), isolation.FdPath(tf), "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("mount(MS_BIND): %w", err)
	}
	return privateAfterBind(dir, file)
}

// privateAfterBind takes the bind that mount(2) just made on dir/file out
// of the source's peer group (see moveMountPrivate). Without open_tree there
// is no detached mount to change first: copies the bind already propagated
// to peers of hotplug-disks' mount stay in that group, which is why the
// open_tree path is preferred.
func privateAfterBind(dir *os.File, file string) error {
	f, err := openTarget(dir, file)
	if err != nil {
		return fmt.Errorf("open bound target: %w", err)
	}
	defer f.Close()
	if err := unix.Mount("", isolation.FdPath(f), "", unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("mount(MS_PRIVATE): %w", err)
	}
	return nil
}

// moveMountPrivate clones the mount of the source (open_tree without
// AT_RECURSIVE: only the source's own mount, submounts stay behind), makes
// the clone private while it is still detached (makePrivate), and
// attaches it onto the target fd.
func moveMountPrivate(src, dst *os.File) error {
	tree, err := unix.OpenTree(int(src.Fd()), "", unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_EMPTY_PATH)
	if err != nil {
		return fmt.Errorf("open_tree: %w", err)
	}
	// The tree fd pins the new mount: it must be closed before anything
	// tries to unmount it.
	defer unix.Close(tree)
	if err := makePrivate(tree); err != nil {
		return err
	}
	if err := unix.MoveMount(tree, "", int(dst.Fd()), "", unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_EMPTY_PATH); err != nil {
		return fmt.Errorf("move_mount: %w", err)
	}
	// move_mount mounts on whatever is mounted on dst by now.
	return undoIfLanded(tree, dst)
}

// makePrivate takes the detached clone out of the peer group it inherited
// from the CSI publish mount. Left shared, anything later mounted on
// <vol>.img (virt-handler racing the agent) propagates onto disk.img inside
// the publish and staging mounts, and NodeUnpublish/NodeUnstage then fail
// with "target is busy". Moved under the shared hotplug-disks mount, the
// clone still gets a peer group of its own, so the launcher's slave view
// receives it. mount_setattr needs 5.12; older kernels with open_tree
// accept mount(2) on the detached tree through its fd.
//
// The same holds for a directory volume's clone: left in the peer group of
// the kubelet's volume mount, whatever is mounted inside the PVC later
// reaches the launcher.
func makePrivate(tree int) error {
	attr := unix.MountAttr{Propagation: unix.MS_PRIVATE}
	err := mountSetattr(tree, "", unix.AT_EMPTY_PATH, &attr)
	if errors.Is(err, unix.ENOSYS) {
		err = unix.Mount("", "/proc/self/fd/"+strconv.Itoa(tree), "", unix.MS_PRIVATE, "")
	}
	if err != nil {
		return fmt.Errorf("make the detached bind private: %w", err)
	}
	return nil
}

func (a *Attacher) chown(s steps, f *os.File, st unix.Stat_t) error {
	uid, gid := a.qemuIDs()
	if int(st.Uid) == uid && int(st.Gid) == gid {
		return nil
	}
	if err := s.next("chown"); err != nil {
		return fmt.Errorf("chown %q: %w", f.Name(), err)
	}
	if err := unix.Fchownat(int(f.Fd()), "", uid, gid, unix.AT_EMPTY_PATH|unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return fmt.Errorf("chown %q to %d:%d: %w", f.Name(), uid, gid, err)
	}
	return nil
}

func (a *Attacher) detach(t *mountinfo.Table, targetDir, file string) (outcome.Result, error) {
	if err := ValidTarget(file); err != nil {
		return "", fmt.Errorf("detach from %q: %w", filepath.Join(a.KubeletRoot, targetDir), err)
	}
	return inHost(a, func(s steps) (outcome.Result, error) { return a.detachHere(s, t, targetDir, file) })
}

func (a *Attacher) detachHere(s steps, t *mountinfo.Table, targetDir, file string) (outcome.Result, error) {
	dir, dirID, err := a.existingTargetDir(t, targetDir)
	if err != nil || dir == nil {
		return outcome.Unchanged, err
	}
	defer dir.Close()
	where := filepath.Join(dir.Name(), file)
	tg, err := inspectTarget(t, dir, dirID, file)
	if err != nil {
		return "", err
	}
	if !tg.exists {
		return outcome.Unchanged, nil
	}
	if _, err := peel(s, t, dir, dirID, file); err != nil {
		return "", err
	}
	f, err := openTarget(dir, file)
	if errors.Is(err, unix.ENOENT) {
		return outcome.Removed, nil
	}
	if err != nil {
		return "", fmt.Errorf("open target %q: %w", where, err)
	}
	var st unix.Stat_t
	err = unix.Fstat(int(f.Fd()), &st)
	f.Close()
	if err != nil {
		return "", fmt.Errorf("stat target %q: %w", where, err)
	}
	if kind := isolation.FileKind(st.Mode); kind != "regular file" {
		return "", fmt.Errorf("target %q after unmounting: %w: is a %s, not a regular file", where, isolation.ErrUnsafePath, kind)
	}
	if err := s.next("remove target"); err != nil {
		return "", fmt.Errorf("remove target %q: %w", where, err)
	}
	if err := unix.Unlinkat(int(dir.Fd()), file, 0); err != nil && !errors.Is(err, unix.ENOENT) {
		return "", fmt.Errorf("remove target %q: %w", where, err)
	}
	return outcome.Removed, nil
}

// openKubeletRoot opens the trusted root every lookup starts from. It is
// opened per call, in the host namespace, so that a kubelet root remounted
// meanwhile is seen as it is now.
func openKubeletRoot(path string) (*os.File, error) {
	return isolation.OpenRoot(path)
}

// ignoreUnsafe drops a refusal of tenant content, keeping other errors.
func ignoreUnsafe(err error) error {
	if errors.Is(err, isolation.ErrUnsafePath) {
		return nil
	}
	return err
}
