// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"hash/fnv"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/mount"
)

// lookThreads is how many threads in the host namespace read for Observe,
// beside the one that changes the node: two let two workers observe at
// once while a third attaches. On the scale node (two cores, four
// workers) four were no faster than two.
const lookThreads = 2

// looker is one thread in the host namespace that only reads: Observe's
// listing, the storage probe, and the launcher's and QEMU's checks. They
// change nothing, so they need not wait behind attaches and detaches, which
// run on runners of their own (storage.go). A stuck read is abandoned on
// its looker's thread as any call is.
type looker struct {
	ns *isolation.MountNamespace
	// attacher is the engine's attacher on ns; only its reads are called.
	// here is the same attacher for code already running on ns (NS nil:
	// it runs its steps on the calling thread).
	attacher, here *mount.Attacher
}

// openLookers starts n lookers beside the attacher a, each a copy of a on a
// namespace thread of its own with a's call timeout.
func openLookers(nsPath string, a mount.Attacher, timeout time.Duration, n int) ([]looker, error) {
	out := make([]looker, 0, n)
	for range n {
		ns, err := isolation.OpenMountNamespace(nsPath)
		if err != nil {
			closeLookers(out)
			return nil, err
		}
		ns.SetTimeout(timeout)
		at, here := a, a
		at.NS, here.NS = ns, nil
		out = append(out, looker{ns: ns, attacher: &at, here: &here})
	}
	return out, nil
}

func closeLookers(ls []looker) {
	for _, l := range ls {
		l.ns.Close()
	}
}

// lookerOf is the looker of the launcher: always the same one, so the reads
// of one launcher stay in order as on one thread.
func (e *Engine) lookerOf(launcher types.UID) looker {
	h := fnv.New32a()
	h.Write([]byte(launcher))
	return e.lookers[h.Sum32()%uint32(len(e.lookers))]
}
