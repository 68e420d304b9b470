package node

import (
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/agent"
	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/mount"
)

// growMemo remembers, per target, the last growth check that found nothing
// to do, with what would change its answer: the mount on the target, the
// size of its device, and the claim's capacity. A resync of a node whose
// volumes did not change then costs one sysfs read per volume instead of a
// full check (open the target and the device, statfs, read the
// superblock).
type growMemo struct {
	mu   sync.Mutex
	last map[growKey]grown
}

type growKey struct {
	launcher types.UID
	name     string
}

type grown struct {
	mountID     int
	deviceBytes int64
	capacity    int64
	overhead    float64
	result      agent.GrowResult
}

// recall returns the remembered result when nothing it depends on changed.
func (m *growMemo) recall(k growKey, now grown) (agent.GrowResult, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	g, ok := m.last[k]
	if !ok || g.mountID != now.mountID || g.deviceBytes != now.deviceBytes || g.capacity != now.capacity || g.overhead != now.overhead {
		return agent.GrowResult{}, false
	}
	return g.result, true
}

func (m *growMemo) remember(k growKey, g grown) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.last == nil {
		m.last = map[growKey]grown{}
	}
	m.last[k] = g
}

func (m *growMemo) forget(k growKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.last, k)
}

// quickGrow answers a growth check from the memo when the mount on the
// target and its device's size are what they were at the last check that
// found nothing to grow. The mount comes from the batch's mount table and
// the size from sysfs: no file of the volume is opened.
func (e *Engine) quickGrow(t *mount.Table, v agent.DesiredVolume) (agent.GrowResult, grown, bool) {
	now := grown{capacity: v.CapacityBytes, overhead: v.FilesystemOverhead}
	if e.grow.DiskImages {
		return agent.GrowResult{}, now, false // the image's target moves with the free space
	}
	target := e.root.Abs(kubelet.HotplugDisksDir(string(v.LauncherUID)) + "/" + kubelet.TargetName(v.Name))
	top, depth := t.Top(target)
	if top == nil || depth != 1 {
		return agent.GrowResult{}, now, false
	}
	size, err := mount.BlockDeviceSize(e.sysRoot, top.Major, top.Minor)
	if err != nil {
		return agent.GrowResult{}, now, false
	}
	now.mountID, now.deviceBytes = top.ID, size
	r, ok := e.memo.recall(growKey{v.LauncherUID, v.Name}, now)
	return r, now, ok
}
