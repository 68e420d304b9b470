package node

import (
	"errors"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/blockdev"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/propagation"
)

// entryKey is what an entry of hotplug-disks is: the bind's mount id
// (filesystem), or the device its node points at (block).
type entryKey struct {
	mountID uint64
	device  blockdev.Device
}

// heldMemo remembers, per volume, the entry at which the launcher's QEMU
// was last found not to hold a stale device or file.
//
// That is enough to ask QEMU again only when the entry changed: QEMU
// opens an entry by its name, so it can only ever hold what the name
// pointed at when it opened it. While the entry stays the same (the same
// bind, named by its mount id for as long as it stays mounted, or a node
// on the same device), whatever QEMU opens, now or later, is current, and
// a volume found not stale stays so. A storage re-attach shows as a new
// entry (the agent's verify moves the node to the newly published device,
// or the bind is replaced), which is asked about on the next observe. A
// stale verdict is not remembered: QEMU closing the old descriptor (an
// unplug, a VM restart) clears it without the entry changing, and stale
// volumes are few.
type heldMemo struct {
	mu    sync.Mutex
	fresh map[growKey]entryKey
}

func (m *heldMemo) has(k growKey, e entryKey) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	got, ok := m.fresh[k]
	return ok && got == e
}

func (m *heldMemo) put(k growKey, e entryKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.fresh == nil {
		m.fresh = map[growKey]entryKey{}
	}
	m.fresh[k] = e
}

func (m *heldMemo) forget(k growKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.fresh, k)
}

// staleOpen asks the launcher's QEMU whether it holds, under target, a
// device or file that is no longer volume name's, through
// propagation.LauncherView.Held (the rule diag judges stale-open by). A
// block entry is compared with the device its node points at now, which
// the agent's verify keeps on the published one. It returns why when
// stale, "" otherwise or when nothing can be told (no QEMU, the pod's
// processes not found); only a call stuck past its deadline is an error.
func (e *Engine) staleOpen(launcher types.UID, name, target string, entry entryKey) (string, error) {
	k := growKey{launcher, name}
	if e.held.has(k, entry) {
		return "", nil
	}
	why, err := isolation.Call(e.ns, func() (string, error) {
		cur := propagation.Current{Block: true, Device: devNumber(entry.device)}
		if entry.mountID != 0 {
			id, err := e.targetIdent(hotplugDisks(launcher), target)
			if err != nil {
				return "", nil // gone or unsafe meanwhile: the observe or attach says so
			}
			cur = propagation.Current{File: id}
		}
		h, detail, err := e.view.Held(string(launcher), target, cur)
		if err != nil {
			return "", nil // the pod's processes could not be listed: nothing told
		}
		if h != propagation.StaleOpen {
			e.held.put(k, entry)
			return "", nil
		}
		return detail, nil
	})
	if errors.Is(err, isolation.ErrStuck) {
		return "", stuck(err)
	}
	return why, nil
}

// fileStaleOpen is staleOpen of a filesystem volume's bind.
func (e *Engine) fileStaleOpen(launcher types.UID, name string, mountID uint64) (string, error) {
	if mountID == 0 {
		return "", nil // no bind to compare with
	}
	return e.staleOpen(launcher, name, kubelet.TargetName(name), entryKey{mountID: mountID})
}
