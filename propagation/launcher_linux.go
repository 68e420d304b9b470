package propagation

import (
	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/podcgroup"
)

func (v LauncherView) check(kubeletRoot, hotplugDir, launcher, target string) (Look, error) {
	if v.Dir == "" || v.Pods == nil {
		return Look{}, nil
	}
	cgs, err := v.Pods.Find(v.CgroupRoot, launcher)
	if err != nil {
		return Look{}, nil // no pod cgroup: no process to ask
	}
	pids, err := podcgroup.Procs(cgs)
	if err != nil || len(pids) == 0 {
		return Look{}, nil
	}
	root, err := isolation.OpenRoot(kubeletRoot)
	if err != nil {
		return Look{}, err
	}
	defer root.Close()
	dir, err := isolation.OpenBeneath(root, hotplugDir, isolation.How{Flags: unix.O_PATH | unix.O_DIRECTORY})
	if err != nil {
		return Look{}, err
	}
	defer dir.Close()
	t, err := isolation.OpenBeneath(dir, target, isolation.How{Flags: unix.O_PATH})
	if err != nil {
		return Look{}, err
	}
	defer t.Close()
	id, err := isolation.MountID(t)
	if err != nil {
		return Look{}, err
	}
	want, err := identOf(t)
	if err != nil {
		return Look{MountID: id}, err
	}
	l := Launcher{Proc: v.Proc, Pids: pids, Dir: v.Dir}
	if l.DirIdent, err = identOf(dir); err != nil {
		return Look{MountID: id}, err
	}
	sight, binds, err := Reached(l, target, want)
	return Look{Sight: sight, MountID: id, Binds: binds}, err
}
