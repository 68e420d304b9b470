// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"time"
)

// reconcile brings one VMI's launchers on this node in line with the VMI,
// in phases, each in its own file: read the caches (world.go), decide
// what is wanted (decide.go, pure), look at the API server and the node
// (observe.go), plan the engine calls (plan.go, pure), make them
// (apply.go), decide what it all means (summarize.go, pure) and say it
// once (report.go). A VMI gone from the caches goes the same way: it is a
// world in which its remembered launchers want nothing.
func (a *Agent) reconcile(ctx context.Context, key string) error {
	start := time.Now()
	pass := passReport{Key: key}
	if w, err := a.readWorld(ctx, key, start); err != nil {
		pass.Errs = []error{err}
	} else {
		d := decide(w)
		o := a.observe(ctx, d)
		plans := planPass(d, o)
		done := a.applyPass(ctx, o.Snap, plans)
		pass = summarizePass(d, o, done)
	}
	pass.Started = start
	return a.report(pass)
}

// launcherDirKey is the volume of a refusal of the launcher's hotplug-disks
// directory as a whole: no volume name contains "/", so it cannot collide.
const launcherDirKey = "hotplug-disks/"
