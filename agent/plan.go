package agent

import "sort"

// opKind is one step of a plan.
type opKind string

const (
	opDetach opKind = "detach"
	opAttach opKind = "attach"
	// opVerify re-checks an observed, healthy block node against the
	// volume's current device on resync; the engine replaces it only if it
	// is wrong.
	opVerify opKind = "verify"
	opGrow   opKind = "grow"
)

// op is one planned engine call.
type op struct {
	Kind     opKind
	Name     string
	Intent   *volumeIntent   // attach, verify, grow
	Observed *ObservedVolume // detach; attach/verify when present
}

// planInput is everything a plan is computed from.
type planInput struct {
	// Spec is nil when the VMI is gone: everything observed is detached.
	Spec     *VMISpec
	Intents  []volumeIntent
	Observed []ObservedVolume
	// Resync is set on the periodic pass: block nodes are re-verified and
	// mounted volumes get a growth check.
	Resync          bool
	GrowFilesystems bool
	// CapacityChanged reports whether capacity differs from the last one a
	// growth check ran for (true when none ran yet).
	CapacityChanged func(name string, capacity int64) bool
}

// healthy reports whether an observed entry already is what a volume of
// mode wants: a single live mount, or a block node.
func healthy(o *ObservedVolume, mode VolumeMode) bool {
	if o == nil || o.Mode != mode {
		return false
	}
	if mode == Filesystem {
		return o.Mounted && o.Stacked <= 1 && !o.SourceGone
	}
	return true
}

// buildPlan returns the ordered engine calls that turn observed into
// desired: detaches first (they free names), then attaches and verifies,
// then growth checks. Everything already right yields an empty plan.
func buildPlan(in planInput) []op {
	observed := make(map[string]*ObservedVolume, len(in.Observed))
	for i := range in.Observed {
		observed[in.Observed[i].Name] = &in.Observed[i]
	}
	var detaches, attaches, grows []op
	for i := range in.Observed {
		o := &in.Observed[i]
		if in.Spec == nil || !in.Spec.HasVolume(o.Name) {
			detaches = append(detaches, op{Kind: opDetach, Name: o.Name, Observed: o})
		}
	}
	if in.Spec != nil {
		for i := range in.Intents {
			it := &in.Intents[i]
			if it.Refused != nil {
				continue
			}
			o := observed[it.Desired.Name]
			ok := healthy(o, it.Desired.Mode)
			switch {
			case it.Attachable && !ok:
				attaches = append(attaches, op{Kind: opAttach, Name: it.Desired.Name, Intent: it, Observed: o})
			case it.Attachable && it.Desired.Mode == Block && in.Resync:
				attaches = append(attaches, op{Kind: opVerify, Name: it.Desired.Name, Intent: it, Observed: o})
			}
			if !ok {
				// A volume attached in this pass is not in this pass's
				// mount table snapshot; its growth check runs in the
				// pass that follows the attach.
				continue
			}
			if it.Desired.Mode == Filesystem && !in.GrowFilesystems {
				continue
			}
			if in.Resync || in.CapacityChanged == nil || in.CapacityChanged(it.Desired.Name, it.Desired.CapacityBytes) {
				grows = append(grows, op{Kind: opGrow, Name: it.Desired.Name, Intent: it, Observed: o})
			}
		}
	}
	for _, ops := range [][]op{detaches, attaches, grows} {
		sort.SliceStable(ops, func(i, j int) bool { return ops[i].Name < ops[j].Name })
	}
	plan := append(detaches, attaches...)
	return append(plan, grows...)
}
