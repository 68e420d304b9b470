// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"errors"
	"slices"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/blockdev"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/mount"
	"github.com/hpmount/hpmount/propagation"
)

// entryKey is what an entry of hotplug-disks is: the bind's mount id and
// source (filesystem), or the device its node points at (block). The
// mount id alone does not tell a replaced bind: the id of the unmounted
// bind is free at once, and the new bind often gets it.
type entryKey struct {
	mountID uint64
	source  string // "MAJ:MIN root" of the bind
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
//
// It also keeps the launcher's binds each filesystem target had
// (propagation.Look.Binds, from the propagation check, made once per host
// bind while that bind is live): once a bind is replaced, QEMU's
// descriptor of the old disk.img is on a detached mount that names no
// path, and only those binds tie it to the volume. They are kept until the
// volume is detached or its launcher's hotplug-disks holds nothing
// (forgetLauncher), the last maxFormer of them; an agent restarted since
// the replacement has none, and then reports the volume not stale.
type heldMemo struct {
	mu     sync.Mutex
	fresh  map[growKey]entryKey
	former map[growKey][]propagation.Bound
}

// maxFormer bounds the binds kept per volume: a bind replaced more often
// while QEMU keeps its oldest descriptor is past what a node sees.
const maxFormer = 4

// remember adds binds to what volume k's target had.
func (m *heldMemo) remember(k growKey, binds []propagation.Bound) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.former == nil {
		m.former = map[growKey][]propagation.Bound{}
	}
	m.former[k] = withBinds(m.former[k], binds)
}

// withBinds is kept with binds added, the last maxFormer kept.
func withBinds(kept, binds []propagation.Bound) []propagation.Bound {
	kept = slices.Clone(kept)
	for _, b := range binds {
		if !slices.Contains(kept, b) {
			kept = append(kept, b)
		}
	}
	if len(kept) > maxFormer {
		kept = slices.Clone(kept[len(kept)-maxFormer:])
	}
	return kept
}

// binds is what volume k's target had, as remember kept it.
func (m *heldMemo) binds(k growKey) []propagation.Bound {
	m.mu.Lock()
	defer m.mu.Unlock()
	return slices.Clone(m.former[k])
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
	delete(m.former, k)
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
	former := e.held.binds(k)
	v, err := isolation.Call(e.lookerOf(launcher).ns, func() (verdict, error) {
		return e.heldHere(e.view, launcher, target, entry, former), nil
	})
	if errors.Is(err, isolation.ErrStuck) {
		return "", stuck(err)
	}
	return e.noteHeld(k, entry, v), nil
}

// verdict is what heldHere tells of QEMU. It is the call's value, and the
// memo is written by the caller (noteHeld), only from a call that
// finished: an abandoned call may return after forgetLauncher dropped the
// launcher, and must not bring it back.
type verdict struct {
	fresh bool   // QEMU holds nothing stale: remember the entry
	why   string // why it is stale
}

// heldHere is staleOpen's question, on a thread in the host namespace;
// former are the launcher's binds the target had; view is whom it asks.
func (e *Engine) heldHere(view propagation.LauncherView, launcher types.UID, target string, entry entryKey, former []propagation.Bound) verdict {
	cur := propagation.Current{Block: true, Device: entry.device.Number()}
	if entry.mountID != 0 {
		id, err := propagation.TargetIdent(e.root.Path, hotplugDisks(launcher), target)
		if err != nil {
			return verdict{} // gone or unsafe meanwhile: the observe or attach says so
		}
		cur = propagation.Current{File: id, Former: former}
	}
	h, detail, err := view.Held(string(launcher), target, cur)
	if err != nil {
		return verdict{} // the pod's processes could not be listed: nothing told
	}
	if h != propagation.StaleOpen {
		return verdict{fresh: true}
	}
	return verdict{why: detail}
}

// noteHeld remembers a fresh entry and returns why it is stale, or "".
func (e *Engine) noteHeld(k growKey, entry entryKey, v verdict) string {
	if v.fresh {
		e.held.put(k, entry)
	}
	return v.why
}

// fileEntry is the entry of a filesystem or directory volume's bind, as
// observed.
func fileEntry(f mount.Observed) entryKey {
	return entryKey{mountID: uint64(f.MountID), source: f.Dev + " " + f.Root}
}
