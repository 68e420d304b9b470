// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"errors"
	"fmt"
	"sync"

	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/hotplug"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/mountinfo"
	"github.com/hpmount/hpmount/outcome"
)

// A batch's snapshot is one of two kinds, chosen at New:
//
//   - tableSnapshot: the host's whole mountinfo, read once per batch
//     (kernels before 6.8, or Config.WholeTable);
//   - beneathSnapshot: nothing read up front; each call reads what is
//     mounted in its own launcher's hotplug-disks with statmount(2)
//     (mountinfo.ReadBeneath), in the host namespace, when it needs it.
//
// Both hand mount and blockdev the same *mountinfo.Table entries for the
// launcher, keyed by the same mount ids (the mountinfo ones, which statx
// STATX_MNT_ID names), so nothing below the engine knows which one it got.

// errCovered is readUncovered's word that a mount covers the directory
// itself: mount's rule for such a directory (a hotplug-disks that is a
// mount of its own) needs the whole table, and what a statmount read of the
// directory lists is the covering mount's, not what lies under it.
var errCovered = errors.New("the directory is a mount of its own")

// readUncovered is mountinfo.ReadBeneath of dir and also, on the calling
// thread, or errCovered when a mount covers dir itself.
func readUncovered(dir string, also ...string) (*mountinfo.Table, error) {
	t, err := mountinfo.ReadBeneath(dir, also...)
	if err != nil {
		return nil, err
	}
	if top, _ := t.Top(dir); top != nil {
		return nil, errCovered
	}
	return t, nil
}

type tableSnapshot struct{ t *mountinfo.Table }

func (s tableSnapshot) Entries() int { return s.t.Len() }

func (s tableSnapshot) Unparsed() (int, error) {
	k := s.t.Skipped()
	return k.Lines, k.First
}

// beneathSnapshot reads each launcher's mounts when a call needs them. The
// whole table is read at most once per snapshot, only for a launcher whose
// hotplug-disks is a mount of its own: mount's rule for that mount (its
// tmpfs mounted nowhere else on the node) needs every mount of the node.
//
// A launcher's mounts read by Observe serve the snapshot's later calls
// about the launcher (the verify of its block nodes, its growth checks)
// until the engine changes something in its hotplug-disks: the same
// promise the whole table of tableSnapshot makes, for the same life (the
// agent's snapshot cache drops a snapshot after a second, or at once for a
// launcher changed since the read). Read again per call, a resync wave
// read each launcher's mounts up to six times.
type beneathSnapshot struct {
	once  sync.Once
	whole *mountinfo.Table
	err   error

	mu     sync.Mutex
	listed map[types.UID]*mountinfo.Table
}

// keep remembers the launcher's mounts as Observe read them.
func (s *beneathSnapshot) keep(launcher types.UID, t *mountinfo.Table) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.listed == nil {
		s.listed = map[types.UID]*mountinfo.Table{}
	}
	s.listed[launcher] = t
}

func (s *beneathSnapshot) kept(launcher types.UID) (*mountinfo.Table, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	t, ok := s.listed[launcher]
	return t, ok
}

// forgetListed drops the launcher's mounts after a call that may have changed
// them: a change, or an error that leaves unsaid what was done.
func forgetListed(s hotplug.Snapshot, launcher types.UID, r outcome.Result, err error) {
	bs, ok := s.(*beneathSnapshot)
	if !ok || (r == outcome.Unchanged && err == nil) {
		return
	}
	bs.mu.Lock()
	defer bs.mu.Unlock()
	delete(bs.listed, launcher)
}

// Entries is 0: no table was read for the batch.
func (s *beneathSnapshot) Entries() int { return 0 }

func (s *beneathSnapshot) Unparsed() (int, error) { return 0, nil }

// Snapshot reads the host's mountinfo once, or, where statmount(2) works,
// nothing yet: each call then reads its own launcher's mounts.
func (e *Engine) Snapshot(ctx context.Context) (hotplug.Snapshot, error) {
	if e.noStatmount == nil {
		return &beneathSnapshot{}, nil
	}
	t, err := mountinfo.ReadTable(e.host.MountInfo())
	if err != nil {
		return nil, err
	}
	return tableSnapshot{t}, nil
}

// tableFor returns the mounts a call about launcher needs: the batch's
// table, or what is mounted in the launcher's hotplug-disks now and on the
// paths of also (relative to the kubelet root, e.g. the volume a bind is
// made from), read on a thread of ns.
func (e *Engine) tableFor(ns *isolation.MountNamespace, s hotplug.Snapshot, launcher types.UID, also ...string) (*mountinfo.Table, error) {
	switch s := s.(type) {
	case tableSnapshot:
		if s.t != nil {
			return s.t, nil
		}
	case *beneathSnapshot:
		if t, ok := s.kept(launcher); ok && len(also) == 0 {
			return t, nil
		}
		dir := e.root.Abs(hotplugDisks(launcher))
		paths := make([]string, len(also))
		for k, p := range also {
			paths[k] = e.root.Abs(p)
		}
		return mountsUnder(ns, dir, paths, func() (*mountinfo.Table, error) { return s.wholeTable(e) })
	}
	return nil, fmt.Errorf("snapshot %T is not a mount table", s)
}

// mountsUnder reads, on a thread of ns, what is mounted on dir's entries
// and on the paths of also; where a mount covers dir itself, it returns
// whole's table instead (readUncovered says why).
func mountsUnder(ns *isolation.MountNamespace, dir string, also []string, whole func() (*mountinfo.Table, error)) (*mountinfo.Table, error) {
	t, err := isolation.Call(ns, func() (*mountinfo.Table, error) { return readUncovered(dir, also...) })
	if errors.Is(err, errCovered) {
		return whole()
	}
	if err != nil {
		return nil, stuck(err)
	}
	return t, nil
}

func (s *beneathSnapshot) wholeTable(e *Engine) (*mountinfo.Table, error) {
	s.once.Do(func() { s.whole, s.err = mountinfo.ReadTable(e.host.MountInfo()) })
	return s.whole, s.err
}

// Observation names how the engine learns what is mounted: "statmount"
// (per launcher), or "mountinfo" and why statmount is not used.
func (e *Engine) Observation() (string, error) {
	if e.noStatmount == nil {
		return "statmount", nil
	}
	return "mountinfo", e.noStatmount
}
