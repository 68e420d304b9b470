// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"slices"
	"sort"

	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/hotplug"
	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/outcome"
)

// op is one planned engine call. outcome.Verify re-checks an observed,
// healthy block node against the volume's current device on resync; the
// engine replaces it only if it is wrong.
type op struct {
	Kind     outcome.Op
	Name     string
	Intent   *volumeIntent   // attach, verify, grow
	Observed *ObservedVolume // detach; attach/verify when present
	// LeftToHandler: a detach whose target virt-handler's record names,
	// which is virt-handler's to remove (HandlerRecord.Leaves). No engine
	// call is made; the result is outcome.LeftToHandler.
	LeftToHandler bool
}

// planInput is everything a plan is computed from.
type planInput struct {
	// VMI is nil when the VMI is gone: everything observed is detached.
	// Otherwise what it keeps (kubevirt.VMI.Keeps) is not.
	VMI      *kubevirt.VMI
	Intents  []volumeIntent
	Observed []ObservedVolume
	// Resync is set on the periodic pass: block nodes are re-verified and
	// mounted volumes get a growth check.
	Resync bool
	// VerifyBlock re-verifies block nodes outside the periodic pass: the
	// compute container changed, or another writer rewrote the
	// launcher's device rules (rules.go).
	VerifyBlock     bool
	GrowFilesystems bool
	// CapacityChanged reports whether capacity differs from the last one a
	// growth check ran for (true when none ran yet).
	CapacityChanged func(name string, capacity int64) bool
	// GrowthReady reports whether a finished growth check of the volume
	// waits to be reported (apply takes it; growth.go).
	GrowthReady func(name string) bool
	// LeftToHandler reports whether an observed volume to detach is
	// virt-handler's to remove; nil leaves nothing to it.
	LeftToHandler func(name string) bool
	// NoDetach plans no detach: whose a target is could not be read.
	NoDetach bool
}

// launcherPlan is the engine calls planned for one launcher. Key names
// the VMI whose growth checks they hand over; "" for a launcher emptied.
type launcherPlan struct {
	Launcher types.UID
	Key      string
	Ops      []op
}

// planPass plans every launcher the pass observed, in the order apply
// runs them: the launchers to empty (nothing is desired there), then the
// served one, which gets its volumes' intents. A launcher that could not
// be observed, or whose hotplug-disks is refused, gets no plan.
func planPass(d decision, o observation) []launcherPlan {
	var plans []launcherPlan
	for _, uid := range d.Clean {
		if ol, ok := o.Clean[uid]; ok && ol.Err == nil {
			plans = append(plans, launcherPlan{Launcher: uid, Ops: buildPlan(planInput{Observed: ol.Volumes,
				LeftToHandler: leftToHandler(d, o, uid), NoDetach: o.HandlerErr != nil})})
		}
	}
	if d.Launcher == nil || o.Snap == nil || o.Launcher.Err != nil || o.Launcher.Refusal != nil {
		return plans
	}
	st := d.State
	return append(plans, launcherPlan{Launcher: d.Launcher.UID, Key: d.Key, Ops: buildPlan(planInput{
		VMI: d.VMI, Intents: d.Intents, Observed: o.Launcher.Volumes, Resync: d.Resync,
		VerifyBlock: st.compute != "" && st.compute != d.Compute || d.VerifyRules, GrowFilesystems: d.GrowFilesystems,
		CapacityChanged: func(name string, c int64) bool {
			last, ok := st.capacity[name]
			return !ok || last != c
		},
		GrowthReady:   o.GrowthReady,
		LeftToHandler: leftToHandler(d, o, d.Launcher.UID), NoDetach: o.HandlerErr != nil,
	})})
}

// leftToHandler is the rule for launcher's detaches: what virt-handler's
// record names is its to remove (HandlerRecord.Leaves), except in a
// launcher whose pod is gone, whose directory the kubelet can remove only
// once it is empty (virt-handler's cleanup passes over a recorded target
// that is gone). The abandoned target of a failed migration is no
// exception: virt-handler's cleanup leaves its binds there
// (kubevirt#17882), but its record keeps them and its Unmount removes them
// should the VMI migrate to this node again; removed first, they would
// make that Unmount fail at every sync (TestVirtHandlerMigrationAgain).
// The orphan sweep applies the same rule (Agent.sweepLauncher).
func leftToHandler(d decision, o observation, launcher types.UID) func(string) bool {
	if slices.Contains(d.PodGone, launcher) {
		return nil
	}
	return func(name string) bool { return o.Handler.Leaves(launcher, name) }
}

// buildPlan returns the ordered engine calls that turn observed into
// desired: detaches first (they free names), then attaches and verifies,
// then growth checks. Everything already right yields an empty plan.
func buildPlan(in planInput) []op {
	observed := make(map[string]*ObservedVolume, len(in.Observed))
	var detaches, attaches, grows []op
	for i := range in.Observed {
		o := &in.Observed[i]
		observed[o.Name] = o
		if (in.VMI == nil || !in.VMI.Keeps(o.Name)) && !in.NoDetach {
			left := in.LeftToHandler != nil && in.LeftToHandler(o.Name)
			detaches = append(detaches, op{Kind: outcome.Detach, Name: o.Name, Observed: o, LeftToHandler: left})
		}
	}
	if in.VMI != nil {
		for i := range in.Intents {
			it := &in.Intents[i]
			if it.Refused != nil {
				continue
			}
			a, g := planVolume(in, it, observed[it.Desired.Name])
			attaches, grows = append(attaches, a...), append(grows, g...)
		}
	}
	for _, ops := range [][]op{detaches, attaches, grows} {
		sort.SliceStable(ops, func(i, j int) bool { return ops[i].Name < ops[j].Name })
	}
	plan := append(detaches, attaches...)
	return append(plan, grows...)
}

// planVolume plans the attach or verify, and the growth check, of one
// volume that is not refused.
func planVolume(in planInput, it *volumeIntent, o *ObservedVolume) (attach, grow []op) {
	ok := o.Healthy(it.Desired.Mode)
	name := it.Desired.Name
	kind, _ := hotplug.KindOf(it.Desired.Mode)
	switch {
	case it.Attachable && !ok:
		attach = []op{{Kind: outcome.Attach, Name: name, Intent: it, Observed: o}}
	case ok && kind.DeviceRule && (in.Resync || in.VerifyBlock):
		// Also when the attachment pod is gone: the node's cgroup rule
		// can be lost long after the volume was published.
		attach = []op{{Kind: outcome.Verify, Name: name, Intent: it, Observed: o}}
	}
	// A volume attached in this pass is not in this pass's mount table
	// snapshot; its growth check runs in the pass that follows the attach.
	// A kind with nothing to size is never checked (Kind.GrowthChecked).
	// A volume whose storage did not answer this pass's probe is not sent
	// to growth, which would only wait on it too: every resync's check
	// held the growth runner for --grow-timeout and wrote off a thread
	// (#37). Its check runs once the storage answers again.
	if !ok || !kind.GrowthChecked(in.GrowFilesystems) || o.Unchecked != nil {
		return attach, nil
	}
	if in.Resync || in.CapacityChanged == nil || in.CapacityChanged(name, it.Desired.CapacityBytes) ||
		in.GrowthReady != nil && in.GrowthReady(name) {
		grow = []op{{Kind: outcome.Grow, Name: name, Intent: it, Observed: o}}
	}
	return attach, grow
}
