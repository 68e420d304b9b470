// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"errors"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/hotplug"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/propagation"
)

// sightMemo remembers, per target, the bind the launcher was last seen to
// receive, as mountinfo names it: mount id and source. A mount never leaves
// a namespace it reached while it stays mounted, so a resync asks the
// launcher again only about a new bind. The mount id alone would not tell
// one: a bind replaced by someone else (virt-handler, an operator) often
// gets the freed id back (entryKey).
type sightMemo struct {
	mu   sync.Mutex
	seen map[growKey]entryKey
}

func (m *sightMemo) has(k growKey, e entryKey) bool {
	m.mu.Lock()
	defer m.mu.Unlock()
	return e.mountID != 0 && m.seen[k] == e
}

// put remembers e; a bind not yet read from mountinfo (an attach) is not
// remembered, so the next observe asks once more and remembers it then.
func (m *sightMemo) put(k growKey, e entryKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e.mountID == 0 {
		return
	}
	if m.seen == nil {
		m.seen = map[growKey]entryKey{}
	}
	m.seen[k] = e
}

func (m *sightMemo) forget(k growKey) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.seen, k)
}

// confirmSeen checks, on ns, that the launcher sees the bind on a
// filesystem volume's target as the host made it
// (propagation.LauncherView.Check). bind is the bind as the batch's
// mountinfo shows it (zero: not yet read). It returns an error wrapping
// hotplug.ErrNotPropagated when a process of the launcher mounts
// hotplug-disks yet sees something else there, and nil when it sees the
// bind or nothing can be told: no process of the pod mounts hotplug-disks
// yet (its containers are starting or restarting), or the target cannot
// be looked at, which the attach or observe reports itself. Only a call
// stuck past its deadline is an error of its own.
//
// The look opens the target, which asks the volume's storage, so an
// attach asks it on the attach's own runner (storage.go): on the
// launcher's looker, a volume whose storage stopped answering right after
// its bind held the looker, and every launcher it serves waited out the
// call deadline (a 26.5 s attach beside a hung volume in make
// bench-node's faults rows).
func (e *Engine) confirmSeen(ns *isolation.MountNamespace, launcher types.UID, name string, bind entryKey) error {
	return e.confirmSeenAt(ns, launcher, name, kubelet.TargetName(name), bind)
}

// confirmSeenAt is confirmSeen of the target file (or directory) target of
// volume name.
func (e *Engine) confirmSeenAt(ns *isolation.MountNamespace, launcher types.UID, name, target string, bind entryKey) error {
	k := growKey{launcher, name}
	if e.sight.has(k, bind) {
		return nil
	}
	s, err := isolation.Call(ns, func() (seen, error) { return e.seeHere(e.view, launcher, target), nil })
	if errors.Is(err, isolation.ErrStuck) {
		return stuck(err)
	}
	return e.noteSeen(k, bind, s)
}

// seen is what seeHere tells of the launcher's view. The look is the
// call's value; the memos are written by the caller (noteSeen), only from
// a call that finished: an abandoned call may return after forgetLauncher
// dropped the launcher, and must not bring it back.
type seen struct {
	look propagation.Look
	why  error
}

// seeing, when set, runs as each look of seeHere starts, on its thread:
// tests hold a look there.
var seeing func()

// seeHere is confirmSeen's question, on a thread in the host namespace,
// asked through view.
func (e *Engine) seeHere(view propagation.LauncherView, launcher types.UID, target string) seen {
	if seeing != nil {
		seeing()
	}
	look, why := view.Check(e.root.Path, hotplugDisks(launcher), string(launcher), target)
	return seen{look, why}
}

// noteSeen remembers a bind the launcher sees, with the launcher's binds
// of it for QEMU's check, and returns confirmSeen's verdict.
func (e *Engine) noteSeen(k growKey, bind entryKey, s seen) error {
	switch s.look.Sight {
	case propagation.Seen:
		e.sight.put(k, bind)
		e.held.remember(k, s.look.Binds)
	case propagation.NotSeen:
		return fmt.Errorf("%w: %w", hotplug.ErrNotPropagated, s.why)
	}
	return nil
}
