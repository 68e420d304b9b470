package node

import (
	"errors"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/agent"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubelet"
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

// confirmSeen checks that the launcher sees the bind on a filesystem
// volume's target as the host made it (propagation.LauncherView.Check).
// mountID is the bind's id when known (0: not yet). It returns an error
// wrapping agent.ErrNotPropagated when a process of the launcher mounts
// hotplug-disks yet sees something else there, and nil when it sees the
// bind or nothing can be told: no process of the pod mounts hotplug-disks
// yet (its containers are starting or restarting), or the target cannot be
// looked at, which the attach or observe reports itself. Only a call stuck
// past its deadline is an error of its own.
func (e *Engine) confirmSeen(launcher types.UID, name string, mountID uint64) error {
	return e.confirmSeenAt(launcher, name, kubelet.TargetName(name), mountID)
}

// confirmSeenAt is confirmSeen of the target file (or directory) target of
// volume name.
func (e *Engine) confirmSeenAt(launcher types.UID, name, target string, mountID uint64) error {
	k := growKey{launcher, name}
	if e.sight.has(k, mountID) {
		return nil
	}
	// why is the call's value: nil when the launcher sees the bind or
	// nothing can be told.
	why, err := isolation.Call(e.ns, func() (error, error) {
		look, why := e.view.Check(e.root.Path, hotplugDisks(launcher), string(launcher), target)
		switch look.Sight {
		case propagation.Seen:
			e.sight.put(k, look.MountID)
			e.held.remember(k, look.Binds)
		case propagation.NotSeen:
			return why, nil
		}
		return nil, nil
	})
	if errors.Is(err, isolation.ErrStuck) {
		return stuck(err)
	}
	if why != nil {
		return fmt.Errorf("%w: %w", agent.ErrNotPropagated, why)
	}
	return nil
}
