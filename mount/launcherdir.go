package mount

import "os"

// InLauncherDir runs fn in a's namespace (see Attacher.NS) on the
// launcher's hotplug-disks directory targetDir, relative to a.KubeletRoot,
// opened exactly as a's own operations open it: beneath the kubelet root,
// symlinks refused, and only if it is the kubelet's emptyDir as the
// batch's table t shows it (a plain directory on the pods directory's
// mount, or a memory-medium tmpfs of its own; anything else wraps
// isolation.ErrUnsafePath). A directory that does not exist wraps
// fs.ErrNotExist and fn does not run.
//
// This is how block volumes (package blockdev, which works on the
// descriptor and opens no kubelet path) obey the same rule as file and
// directory binds, with mount its one owner. The descriptor is opened,
// handed to fn and closed on the one thread that runs the call, so a call
// abandoned past its deadline never leaves it behind to be reused.
func InLauncherDir[T any](a *Attacher, t *Table, targetDir string, fn func(dir *os.File) (T, error)) (T, error) {
	return inHost(a, func() (T, error) {
		dir, err := a.openLauncherDir(t, targetDir)
		if err != nil {
			var zero T
			return zero, err
		}
		defer dir.Close()
		return fn(dir)
	})
}

// Uncover unmounts whatever is mounted on name in dir (a launcher's
// hotplug-disks, opened by InLauncherDir), one mount at a time from the
// top and each mount alone, until a lookup of name reaches dir's own
// mount, and says how many it removed. What is below a mount is never
// touched: a host file or device node bound there keeps its owner, mode
// and content. A block node is never a mount target, so whatever is
// mounted on one is not hpmount's, and the engine uncovers the name before
// blockdev makes, verifies or removes the node (blockdev itself refuses to
// work through a mount). Call it inside InLauncherDir's fn.
func Uncover(t *Table, dir *os.File, name string) (int, error) { return uncover(t, dir, name) }
