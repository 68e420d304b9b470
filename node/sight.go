package node

import (
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/agent"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/podcgroup"
	"github.com/hpmount/hpmount/propagation"
)

// sightMemo remembers, per target, the mount the launcher was last seen to
// receive. A mount never leaves a namespace it reached while it stays
// mounted, so a resync asks the launcher again only about a new mount.
type sightMemo struct {
	mu   sync.Mutex
	seen map[growKey]uint64 // mount id
}

func (m *sightMemo) has(k growKey, id uint64) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return id != 0 && m.seen[k] == id
}

func (m *sightMemo) put(k growKey, id uint64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.seen == nil {
		m.seen = map[growKey]uint64{}
	}
	m.seen[k] = id
}

func (m *sightMemo) forget(k growKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.seen, k)
}

// confirmSeen checks that the launcher sees the bind on its target name
// (a filesystem volume's <name>.img) as the host made it: the same device
// and inode, looked at through the launcher's own processes. mountID is the
// bind's id when known (0: read it from the target). It returns an error
// wrapping agent.ErrNotPropagated when a process of the launcher mounts
// hotplug-disks yet sees something else there, and nil when it sees the
// bind or nothing can be told (no process of the pod mounts hotplug-disks
// yet: its containers are starting or restarting; or the target cannot be
// looked at, which the attach or observe that follows reports itself).
// Only a call stuck past its deadline is an error of its own.
func (e *Engine) confirmSeen(launcher types.UID, name string, mountID uint64) error {
	k := growKey{launcher, name}
	if e.sight.has(k, mountID) {
		return nil
	}
	cgs, err := e.pods.Find(e.rules.Root(), string(launcher))
	if err != nil {
		return nil // no pod cgroup: no process to ask
	}
	pids, err := podcgroup.Procs(cgs)
	if err != nil || len(pids) == 0 {
		return nil
	}
	var sight propagation.Sight
	var why error
	err = e.ns.Do(func() error {
		id, l, want, err := e.hostSide(launcher, name)
		if err != nil {
			return err
		}
		l.Pids = pids
		if sight, why = propagation.Reached(l, kubelet.TargetName(name), want); sight == propagation.Seen {
			e.sight.put(k, id)
		}
		return nil
	})
	if errors.Is(err, isolation.ErrStuck) {
		return stuck(err)
	}
	if err == nil && sight == propagation.NotSeen {
		return fmt.Errorf("%w: %w", agent.ErrNotPropagated, why)
	}
	return nil
}

// hostSide opens the launcher's hotplug-disks and the target beneath the
// kubelet root and returns the bind's mount id, the launcher to ask and
// the identity the launcher must see. It runs in the host namespace.
func (e *Engine) hostSide(launcher types.UID, name string) (uint64, propagation.Launcher, propagation.Ident, error) {
	l := propagation.Launcher{Proc: e.host.Proc, Dir: e.launcherDir}
	root, err := isolation.OpenRoot(e.root.Path)
	if err != nil {
		return 0, l, propagation.Ident{}, err
	}
	defer root.Close()
	dir, err := isolation.OpenBeneath(root, hotplugDisks(launcher), isolation.How{Flags: unix.O_PATH | unix.O_DIRECTORY})
	if err != nil {
		return 0, l, propagation.Ident{}, err
	}
	defer dir.Close()
	target, err := isolation.OpenBeneath(dir, kubelet.TargetName(name), isolation.How{Flags: unix.O_PATH})
	if err != nil {
		return 0, l, propagation.Ident{}, err
	}
	defer target.Close()
	id, err := isolation.MountID(target)
	if err != nil {
		return 0, l, propagation.Ident{}, err
	}
	want, err := propagation.IdentOf(target)
	if err != nil {
		return 0, l, propagation.Ident{}, err
	}
	l.DirIdent, err = propagation.IdentOf(dir)
	return id, l, want, err
}
