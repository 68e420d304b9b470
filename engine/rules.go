// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package engine

import (
	"context"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/blockdev"
	"github.com/hpmount/hpmount/hotplug"
)

var _ hotplug.RuleWatcher = (*Engine)(nil)

// How often the watched launchers' device rules are asked whether
// another writer rewrote them: the longest a lost rule waits for the agent
// to hear of it, far below the resync period. On cgroup v2 every
// virt-handler sync can drop a rule (kubevirt#7710), and one ask is one
// BPF_PROG_QUERY per cgroup. On v1 virt-handler only adds rules, a
// runtime update is what drops one (kubevirt#14825), and one ask is a
// devices.list read, which the kernel prints line by line: asked twice a
// second on the scale node's 250 launchers, it was a third of the agent's
// CPU with nothing changing (0.19 s a minute).
const (
	rulePollV2 = 500 * time.Millisecond
	rulePollV1 = 2 * time.Second
)

// rulePoll is the interval for the engine's device rules.
func rulePoll(rules blockdev.DeviceRules) time.Duration {
	if _, v1 := rules.(*blockdev.V1); v1 {
		return rulePollV1
	}
	return rulePollV2
}

// ruleWatches holds a watch of the compute container of each launcher
// whose block rules the engine granted or checked (blockdev.RuleWatch).
type ruleWatches struct {
	mu sync.Mutex
	by map[types.UID]ruleWatched
	// closing are watches replaced or forgotten, closed by the next ask:
	// only the asking goroutine uses a watch, so only it closes one.
	closing []blockdev.RuleWatch
}

type ruleWatched struct {
	container string
	w         blockdev.RuleWatch
}

// watch watches c's rules from now on, unless its container is watched
// already. A watch that cannot be made (the container's cgroup is gone)
// is not kept: the resync still verifies the launcher's block volumes.
func (r *ruleWatches) watch(rules blockdev.DeviceRules, c blockdev.Container) {
	l := types.UID(c.PodUID)
	r.mu.Lock()
	cur, ok := r.by[l]
	r.mu.Unlock()
	if ok && cur.container == c.ID {
		return
	}
	w, err := rules.Watch(c)
	if err != nil {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.by == nil {
		r.by = map[types.UID]ruleWatched{}
	}
	if old, ok := r.by[l]; ok {
		r.closing = append(r.closing, old.w)
	}
	r.by[l] = ruleWatched{container: c.ID, w: w}
}

func (r *ruleWatches) forget(launcher types.UID) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if old, ok := r.by[launcher]; ok {
		r.closing = append(r.closing, old.w)
		delete(r.by, launcher)
	}
}

// close closes every watch; asking one afterwards fails and drops it.
func (r *ruleWatches) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	for l, w := range r.by {
		_ = w.w.Close()
		delete(r.by, l)
	}
	for _, w := range r.closing {
		_ = w.Close()
	}
	r.closing = nil
}

// changed asks every watch and returns the launchers whose rules were
// rewritten. A watch that fails (its cgroup went with the container) is
// dropped; the next verify of the launcher watches the new container.
func (r *ruleWatches) changed() []types.UID {
	r.mu.Lock()
	all := make(map[types.UID]ruleWatched, len(r.by))
	for l, w := range r.by {
		all[l] = w
	}
	closing := r.closing
	r.closing = nil
	r.mu.Unlock()
	for _, w := range closing {
		_ = w.Close()
	}
	var out []types.UID
	for l, w := range all {
		ch, err := w.w.Changed()
		if err != nil {
			r.drop(l, w.w)
			continue
		}
		if ch {
			out = append(out, l)
		}
	}
	return out
}

// drop forgets and closes the launcher's watch w, unless a newer one
// replaced it (which closes w then).
func (r *ruleWatches) drop(l types.UID, w blockdev.RuleWatch) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if cur, ok := r.by[l]; ok && cur.w == w {
		delete(r.by, l)
		_ = w.Close()
	}
}

// WatchRules reports to changed, from one goroutine and until ctx ends,
// the launchers whose device rules were rewritten by anyone, hpmount
// included (hotplug.RuleWatcher), within rulePoll. Only launchers whose
// block volumes the engine attached or verified are watched.
func (e *Engine) WatchRules(ctx context.Context, changed func(hotplug.MountChange)) error {
	t := time.NewTicker(rulePoll(e.rules))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if ls := e.ruleWatch.changed(); len(ls) > 0 {
			changed(hotplug.MountChange{Launchers: ls})
		}
	}
}
