// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"errors"
	"fmt"

	"github.com/hpmount/hpmount/hotplug"
	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/outcome"
)

// busyWarnAfter is how many growth checks in a row may wait (ErrBusy)
// before the volume gets a Warning: one lost race with NodeExpandVolume is
// normal, but a check that keeps waiting (a kubelet tree that cannot be
// read, say) was retried on every pass with nothing said.
const busyWarnAfter = 3

// grown reports a growth check. A failure is reported but not retried
// before the next resync or capacity change: retrying a missing capability
// in a loop helps nobody.
func (s *summary) grown(in summaryInput, r applied) {
	v := r.Op.Intent.Desired
	if errors.Is(r.Err, ErrBusy) {
		// Lost a race with NodeExpandVolume: no capacity is recorded,
		// so the next pass checks again; nothing failed, unless it keeps
		// waiting.
		s.Errs = append(s.Errs, fmt.Errorf("grow volume %q: %w", v.Name, r.Err))
		s.Busy[v.Name] = in.Busy[v.Name] + 1
		if s.Busy[v.Name] >= busyWarnAfter {
			s.warn(v.Name, EventExpansionFailed, fmt.Sprintf("Volume %s could not be expanded: its growth checks keep waiting: %v", v.Name, r.Err))
		}
		return
	}
	s.Busy[v.Name] = 0
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
	if o != nil && o.Answering > 0 && (s.RequeueIn == 0 || o.Answering < s.RequeueIn) {
		s.RequeueIn = o.Answering
	}
	mounted := o.Healthy(it.Desired.Mode)
	notSeen := notPropagated(o, r)
	if r != nil {
		mounted = keptMounted(*r)
	}
	switch {
	case refusal != nil:
		s.Events = append(s.Events, refusalEvent(name, refusal))
		s.Volumes = append(s.Volumes, volumeState{Name: name, Mode: mode, Claim: it.Claim, State: StateRefused})
		return
	case mounted && r == nil && o.Unchecked != nil:
		// The bind is in place, but whether the launcher sees it or QEMU
		// holds it stale hung on its storage: neither MountedToPod nor a
		// remount, and only this volume is held back.
		s.warn(name, EventHotplugStuck, fmt.Sprintf("Volume %s: checking it on the node did not finish within its deadline and was abandoned; its mount stays, whether the launcher sees it is unknown: %v", name, o.Unchecked))
		s.Volumes = append(s.Volumes, volumeState{Name: name, Mode: mode, Claim: it.Claim, State: StateFailed})
	case mounted && notSeen != "":
		// QEMU would not find the volume: no MountedToPod, no latency.
		s.warn(name, EventNotPropagated, fmt.Sprintf("Volume %s is mounted on the node but virt-launcher pod does not see it: %s", name, notSeen))
		s.Volumes = append(s.Volumes, volumeState{Name: name, Mode: mode, Claim: it.Claim, State: StateNotPropagated})
	case mounted:
		s.Cleared = append(s.Cleared, onceKey(name, EventNotPropagated))
		if in.ReportVolumeStatus && it.Status != nil && it.Status.Phase != kubevirt.PhaseMountedToPod && it.Status.Phase != kubevirt.PhaseReady {
			s.Status[name] = statusUpdate{kubevirt.PhaseMountedToPod, kubevirt.ReasonMountedToPod, fmt.Sprintf("Volume %s has been mounted in virt-launcher pod", name)}
		}
		s.Volumes = append(s.Volumes, volumeState{Name: name, Mode: mode, Claim: it.Claim, State: StateMounted})
	case r != nil:
		s.Volumes = append(s.Volumes, volumeState{Name: name, Mode: mode, Claim: it.Claim, State: StateFailed})
	default:
		s.Volumes = append(s.Volumes, volumeState{Name: name, Mode: mode, Claim: it.Claim, State: StatePending})
	}
	s.Cleared = append(s.Cleared, onceKey(name, EventHotplugRefused))
}

// staleOpen reports a volume whose entry QEMU holds stale, on the state
// volume just appended: a Warning once per message, and the flag behind
// hpmount_volume_stale_open. A volume QEMU no longer holds stale clears
// the Warning, so that it is sent again if the volume goes stale again.
func (s *summary) staleOpen(o *ObservedVolume) {
	v := &s.Volumes[len(s.Volumes)-1]
	if o == nil || !o.StaleOpen {
		s.Cleared = append(s.Cleared, onceKey(v.Name, EventStaleOpen))
		return
	}
	v.StaleOpen = true
	s.warn(v.Name, EventStaleOpen, fmt.Sprintf("Volume %s: QEMU holds a device or file that is no longer the volume's, so the guest's I/O goes to a disk that is gone: %s. "+
		"No remount reaches QEMU: unplug and plug the volume (virtctl removevolume/addvolume) or restart the VM; hpmount never acts on QEMU", v.Name, o.StaleWhy))
}

// abandoned reports a call left stuck in the kernel. The volume is looked
// at again on the next pass; until then nothing is assumed about it.
func (s *summary) abandoned(r applied) {
	name := r.Op.Name
	s.Errs = append(s.Errs, fmt.Errorf("%s volume %q: %w", r.Op.Kind, name, r.Err))
	s.warn(name, EventHotplugStuck, fmt.Sprintf("Volume %s: %s on the node did not finish within its deadline and was abandoned (a filesystem frozen, or a storage server gone?): %v", name, r.Op.Kind, r.Err))
}

// keptMounted reports whether the volume is mounted after its attach or
// verify: it succeeded, or it failed on a volume that was and stays
// healthy (the normal state once the attachment pod was replaced).
func keptMounted(r applied) bool {
	switch r.Result {
	case outcome.Refused:
		return false
	case outcome.NotPublished, outcome.Error, outcome.Abandoned:
		return r.Op.Observed.Healthy(r.Op.Intent.Desired.Mode)
	}
	return true
}

func (s *summary) attached(r applied) {
	name := r.Op.Name
	switch r.Result {
	case outcome.Refused:
		// reported with the volume's other refusals
	case outcome.NotPublished:
		if !keptMounted(r) {
			s.Errs = append(s.Errs, fmt.Errorf("volume %q: %w", name, r.Err))
		}
	case outcome.Error:
		s.Errs = append(s.Errs, fmt.Errorf("attach volume %q: %w", name, r.Err))
		if !r.Canceled {
			s.warn(name, EventHotplugFailed, fmt.Sprintf("Volume %s could not be made available in virt-launcher pod: %v", name, r.Err))
		}
	default:
		s.Cleared = append(s.Cleared, onceKey(name, EventHotplugFailed))
		if r.NotPropagated != nil {
			return // reported with the volume (summarize_grow.go)
		}
		switch {
		case ruleRestored(r):
			s.warnEach(name, EventDeviceRuleRestored, fmt.Sprintf("Volume %s: its block node was in place but the launcher's device rule was gone, so QEMU's next open of it failed; allowed again. "+
				"Another writer rewrote the launcher's device rules: on cgroup v2, virt-handler's sync rebuilds the device program from its own list, "+
				"which lacks the volumes its Mount did not reach (kubevirt#7710), and a reload of the container's systemd unit reverts them (kubevirt#14825)", name))
		case r.Result.Changed():
			s.normal(name, EventVolumeMounted, fmt.Sprintf("Volume %s has been mounted in virt-launcher pod (%s)", name, r.Result))
		}
		// A block node moved to a new device (a storage re-attach) is
		// asked about soon too: QEMU may still hold the old one.
		if !r.Op.Observed.Healthy(r.Op.Intent.Desired.Mode) || r.Result == outcome.Replaced {
			s.Requeue = true
		}
	}
}

func (s *summary) detached(in summaryInput, r applied) {
	name := r.Op.Name
	if r.Result == outcome.LeftToHandler {
		// virt-handler unmounts it and writes its status; the pass that
		// finds it gone has nothing to do.
		s.LeftToHandler = true
		return
	}
	if r.Result == outcome.Error {
		s.Errs = append(s.Errs, fmt.Errorf("detach volume %q: %w", name, r.Err))
		if !r.Canceled {
			s.warn(name, EventHotplugFailed, fmt.Sprintf("Volume %s could not be removed from virt-launcher pod: %v", name, r.Err))
		}
		return
	}
	s.Cleared = append(s.Cleared, onceKey(name, EventHotplugFailed))
	if r.Result.Changed() {
		s.normal(name, EventVolumeUnmounted, fmt.Sprintf("Volume %s has been unmounted from virt-launcher pod", name))
	}
	if in.VMI == nil {
		return
	}
	if in.VMI.Status.VolumeStatusByName(name) != nil {
		s.Status[name] = statusUpdate{kubevirt.PhaseUnMountedFromPod, kubevirt.ReasonUnMounted, fmt.Sprintf("Volume %s has been unmounted from virt-launcher pod", name)}
	}
	s.Volumes = append(s.Volumes, volumeState{Name: name, Mode: string(r.Op.Observed.Mode), State: StateUnmounted})
}

// notPropagated says why the launcher does not see the volume's mount,
// from this pass's attach or else from what was observed; "" if it does
// or cannot be told.
func notPropagated(o *ObservedVolume, r *applied) string {
	switch {
	case r != nil && r.NotPropagated != nil:
		return r.NotPropagated.Error()
	case r == nil && o != nil && o.NotPropagated:
		return "its view of hotplug-disks does not receive the node's mounts (started before the kubelet's pods directory was shared, or without mountPropagation: HostToContainer); restart the launcher pod (migrate the VM)"
	}
	return ""
}

// ruleRestored: a verify of a node in place found its device rule gone
// and allowed it again (the engine's "created" for such a node).
func ruleRestored(r applied) bool {
	if r.Op.Kind != outcome.Verify || r.Result != outcome.Created || r.Op.Intent == nil {
		return false
	}
	kind, _ := hotplug.KindOf(r.Op.Intent.Desired.Mode)
	return kind.DeviceRule
}
