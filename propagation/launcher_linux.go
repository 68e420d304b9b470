package propagation

import (
	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/podcgroup"
)

func (v LauncherView) check(kubeletRoot, hotplugDir, launcher, target string) (Sight, uint64, error) {
	if v.Dir == "" || v.Pods == nil {
		return NoView, 0, nil
	}
	cgs, err := v.Pods.Find(v.CgroupRoot, launcher)
	if err != nil {
		return NoView, 0, nil // no pod cgroup: no process to ask
	}
	pids, err := podcgroup.Procs(cgs)
	if err != nil || len(pids) == 0 {
		return NoView, 0, nil
	}
	root, err := isolation.OpenRoot(kubeletRoot)
	if err != nil {
		return NoView, 0, err
	}
	defer root.Close()
	dir, err := isolation.OpenBeneath(root, hotplugDir, isolation.How{Flags: unix.O_PATH | unix.O_DIRECTORY})
	if err != nil {
		return NoView, 0, err
	}
	defer dir.Close()
	t, err := isolation.OpenBeneath(dir, target, isolation.How{Flags: unix.O_PATH})
	if err != nil {
		return NoView, 0, err
	}
	defer t.Close()
	id, err := isolation.MountID(t)
	if err != nil {
		return NoView, 0, err
	}
	want, err := identOf(t)
	if err != nil {
		return NoView, id, err
	}
	l := Launcher{Proc: v.Proc, Pids: pids, Dir: v.Dir}
	if l.DirIdent, err = identOf(dir); err != nil {
		return NoView, id, err
	}
	sight, err := Reached(l, target, want)
	return sight, id, err
}
