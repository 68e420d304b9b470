// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"time"
)

// Why the agent watches the launchers' device rules.
//
// A block volume's node can stay in place while its device rule is lost:
// on cgroup v2, each virt-handler sync rebuilds the launcher's device
// program from its own list (kubevirt#7710), which lacks every volume its
// Mount did not reach in that sync (it stops at the first volume that
// fails), and a reload of the container's systemd unit reverts the rules
// (kubevirt#14825). QEMU's next open of such a volume gets EPERM. The
// periodic pass restores the rule, but only once a resync period later;
// reported as the writer makes the change, the launcher's VMI verifies its
// block volumes at once. These passes take tokens from a bucket per VMI as
// the mount events' do (mountevents.go), so a writer that rewrites the
// rules again at once, as virt-handler retrying a failing volume does,
// costs a few passes a second at most. The agent's own restore rewrites
// the rules too, and brings one more pass, which changes nothing.

// watchRules runs the engine's rule watcher, if it has one, until ctx
// ends. The resync stays the safety net.
func (a *Agent) watchRules(ctx context.Context) {
	w, ok := a.engine.(RuleWatcher)
	if !ok {
		return
	}
	h := &mountHolds{}
	err := w.WatchRules(ctx, func(c MountChange) { a.rulesRewritten(h, c, time.Now()) })
	a.watchEnded(ctx, err, "the node reports no device rule rewrites", "device rule rewrite reports stopped",
		"a lost rule is restored at the next resync")
}

// rulesRewritten marks each touched launcher's VMI to verify its block
// volumes, and enqueues it within its bucket.
func (a *Agent) rulesRewritten(h *mountHolds, c MountChange, now time.Time) {
	for _, l := range c.Launchers {
		for _, key := range a.vmiKeysForLauncher(l) {
			a.mu.Lock()
			a.rulesDue[key] = true
			a.mu.Unlock()
			a.admitPass(h, key, now)
		}
	}
}
