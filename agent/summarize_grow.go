package agent

import (
	"errors"
	"fmt"

	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/outcome"
)

// grown reports a growth check. A failure is reported but not retried
// before the next resync or capacity change: retrying a missing capability
// in a loop helps nobody.
func (s *summary) grown(in summaryInput, r applied) {
	v := r.Op.Intent.Desired
	if errors.Is(r.Err, ErrBusy) {
		// Lost a race with NodeExpandVolume: no capacity is recorded,
		// so the next pass checks again; nothing failed.
		s.Errs = append(s.Errs, fmt.Errorf("grow volume %q: %w", v.Name, r.Err))
		return
	}
	s.Capacity[v.Name] = v.CapacityBytes
	if r.Result == outcome.Error {
		s.Expansions = append(s.Expansions, ExpansionFailed)
		s.warn(v.Name, EventExpansionFailed, fmt.Sprintf("Volume %s could not be expanded: %v", v.Name, r.Err))
		return
	}
	s.Cleared = append(s.Cleared, onceKey(v.Name, EventExpansionFailed))
	s.Sizes[v.Name] = r.Grow
	g := r.Grow
	prev, seen := in.LastCapacity[v.Name]
	// A shrink request is a claim that went down and is now below the
	// current size by more than the slack by which backends round devices
	// up. A device that grew before the claim's new size reached the VMI
	// status is not one.
	if seen && v.CapacityBytes < prev && v.CapacityBytes > 0 && g.DeviceBytes > 0 && v.CapacityBytes < g.DeviceBytes-g.SlackBytes {
		s.Ops[len(s.Ops)-1].Result = outcome.Unchanged
		s.Expansions = append(s.Expansions, ExpansionShrinkIgnored)
		s.warn(v.Name, EventShrinkIgnored, fmt.Sprintf("Volume %s: claim capacity %s is below the current size %s; volumes are never shrunk",
			v.Name, size(v.CapacityBytes), size(g.DeviceBytes)))
		return
	}
	if r.Result != outcome.Grown {
		s.Expansions = append(s.Expansions, ExpansionUnchanged)
		return
	}
	s.Expansions = append(s.Expansions, ExpansionGrown)
	msg := fmt.Sprintf("Volume %s: filesystem %s grew from %s to %s", v.Name, g.FilesystemType, size(g.FilesystemBefore), size(g.FilesystemAfter))
	if g.ImageGrown {
		msg += fmt.Sprintf(", disk image from %s to %s", size(g.DiskImageBefore), size(g.DiskImageAfter))
	}
	s.normal(v.Name, EventFilesystemExpanded, msg)
}

// volume decides the state of one hotplug volume of the VMI. r is its
// attach or verify of this pass, nil when none ran.
func (s *summary) volume(in summaryInput, it *volumeIntent, r *applied) {
	name, mode := it.Name, string(it.Desired.Mode)
	if it.Transient != nil {
		s.Errs = append(s.Errs, fmt.Errorf("volume %q: %w", name, it.Transient))
	}
	refusal := it.Refused
	if r != nil && r.Refusal != nil {
		refusal = &kubevirt.Refusal{Reason: r.Refusal.Reason, Message: fmt.Sprintf("volume %q: %s", name, r.Refusal.Message), Err: r.Refusal.Err}
	}
	o := findObserved(in.Observed, name)
	mounted := o.Healthy(it.Desired.Mode)
	notSeen := notPropagated(o, r)
	if r != nil {
		mounted = keptMounted(*r)
	}
	switch {
	case refusal != nil:
		s.Events = append(s.Events, refusalEvent(name, refusal))
		s.Volumes = append(s.Volumes, volumeState{Name: name, Mode: mode, State: StateRefused})
		return
	case mounted && r == nil && o.Unchecked != nil:
		// The bind is in place, but whether the launcher sees it or QEMU
		// holds it stale hung on its storage: neither MountedToPod nor a
		// remount, and only this volume is held back.
		s.warn(name, EventHotplugStuck, fmt.Sprintf("Volume %s: checking it on the node did not finish within its deadline and was abandoned; its mount stays, whether the launcher sees it is unknown: %v", name, o.Unchecked))
		s.Volumes = append(s.Volumes, volumeState{Name: name, Mode: mode, State: StateFailed})
	case mounted && notSeen != "":
		// QEMU would not find the volume: no MountedToPod, no latency.
		s.warn(name, EventNotPropagated, fmt.Sprintf("Volume %s is mounted on the node but virt-launcher pod does not see it: %s", name, notSeen))
		s.Volumes = append(s.Volumes, volumeState{Name: name, Mode: mode, State: StateNotPropagated})
	case mounted:
		s.Cleared = append(s.Cleared, onceKey(name, EventNotPropagated))
		if in.ReportVolumeStatus && it.Status != nil && it.Status.Phase != kubevirt.PhaseMountedToPod && it.Status.Phase != kubevirt.PhaseReady {
			s.Status[name] = statusUpdate{kubevirt.PhaseMountedToPod, kubevirt.ReasonMountedToPod, fmt.Sprintf("Volume %s has been mounted in virt-launcher pod", name)}
		}
		s.Volumes = append(s.Volumes, volumeState{Name: name, Mode: mode, State: StateMounted})
	case r != nil:
		s.Volumes = append(s.Volumes, volumeState{Name: name, Mode: mode, State: StateFailed})
	default:
		s.Volumes = append(s.Volumes, volumeState{Name: name, Mode: mode, State: StatePending})
	}
	s.Cleared = append(s.Cleared, onceKey(name, EventHotplugRefused))
}
