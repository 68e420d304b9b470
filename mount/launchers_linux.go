package mount

import (
	"errors"
	"fmt"
	"sort"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/isolation"
)

// LauncherDirs lists the pods under <kubeletRoot>/pods that have a
// hotplug-disks directory, whether or not a VMI still wants them: what a
// deleted launcher left is found here. It runs in the caller's mount
// namespace; call it inside the host's.
func LauncherDirs(kubeletRoot string) ([]LauncherDir, error) {
	root, err := isolation.OpenRoot(kubeletRoot)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	pods, err := isolation.OpenBeneath(root, "pods", isolation.How{Flags: unix.O_RDONLY | unix.O_DIRECTORY})
	if errors.Is(err, unix.ENOENT) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer pods.Close()
	uids, err := pods.Readdirnames(-1)
	if err != nil {
		return nil, fmt.Errorf("list %q: %w", pods.Name(), err)
	}
	sort.Strings(uids)
	var dirs []LauncherDir
	for _, uid := range uids {
		dir, err := isolation.OpenBeneath(root, HotplugDisksDir(uid), isolation.How{Flags: unix.O_RDONLY | unix.O_DIRECTORY})
		if err != nil {
			continue // no hotplug-disks (not a launcher), or not a plain directory
		}
		names, _ := dir.Readdirnames(1)
		dir.Close()
		dirs = append(dirs, LauncherDir{UID: uid, Empty: len(names) == 0})
	}
	return dirs, nil
}
