// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"maps"
	"sync"

	"k8s.io/apimachinery/pkg/types"
)

// dropLauncher deletes every key of launcher from m under mu: the one way
// the engine's per-volume memos (growMemo, sightMemo, heldMemo,
// answerMemo) let go of a
// launcher whose hotplug-disks holds nothing any more.
func dropLauncher[V any](mu *sync.Mutex, m map[growKey]V, launcher types.UID) {
	mu.Lock()
	defer mu.Unlock()
	maps.DeleteFunc(m, func(k growKey, _ V) bool { return k.launcher == launcher })
}

// forgetLauncher drops what the memos keep of launcher. Detach forgets a
// volume it removes, but a launcher deleted with its VMI is usually gone
// from the kubelet's tree (its binds with it) before the agent looks, so
// nothing is detached and, without this, a node that runs VMIs for months
// would keep every volume it ever served. Observe calls it for a launcher
// with no entry: nothing there is left to remember. The binds heldMemo
// kept go too; a volume attached there again starts without them, as
// after a restart.
func (e *Engine) forgetLauncher(launcher types.UID) {
	dropLauncher(&e.memo.mu, e.memo.last, launcher)
	dropLauncher(&e.sight.mu, e.sight.seen, launcher)
	dropLauncher(&e.held.mu, e.held.fresh, launcher)
	dropLauncher(&e.held.mu, e.held.former, launcher)
	dropLauncher(&e.answers.mu, e.answers.pending, launcher)
	dropLauncher(&e.answers.mu, e.answers.late, launcher)
	e.ruleWatch.forget(launcher)
}
