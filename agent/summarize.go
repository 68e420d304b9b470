package agent

import (
	"fmt"
	"time"

	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/outcome"
)

// Event reasons the agent emits on a VMI.
const (
	EventHotplugRefused     = "HotplugRefused"
	EventHotplugFailed      = "HotplugFailed"
	EventVolumeMounted      = "VolumeMounted"
	EventVolumeUnmounted    = "VolumeUnmounted"
	EventExpansionFailed    = "FilesystemExpansionFailed"
	EventShrinkIgnored      = "ShrinkIgnored"
	EventFilesystemExpanded = "FilesystemExpanded"
	EventHotplugStuck       = "HotplugStuck"
	EventNotPropagated      = "VolumeNotPropagated"
	EventStaleOpen          = "VolumeStaleOpen"
)

// summaryInput is everything one pass decided and did for a launcher.
type summaryInput struct {
	// VMI is nil when the launcher's VMI is gone or unknown: then nothing
	// is reported per volume, only what the calls did.
	VMI      *kubevirt.VMI
	Intents  []volumeIntent
	Observed []ObservedVolume
	Applied  []applied
	// ReportVolumeStatus asks for status.volumeStatus updates.
	ReportVolumeStatus bool
	// LastCapacity is the claim capacity of each volume's last growth check.
	LastCapacity map[string]int64
}

// summary is what a pass means: the state of every volume, the Events,
// metrics and status updates to report, and the errors to retry on.
type summary struct {
	Volumes    []volumeState
	Ops        []opReport
	Expansions []string
	Sizes      map[string]GrowResult
	Events     []event
	// Cleared are the Once keys (see event) whose condition is over.
	Cleared []string
	Status  map[string]statusUpdate
	// Capacity is the claim capacity of each growth check that ran.
	Capacity map[string]int64
	// Requeue: something was attached; check it against a fresh snapshot
	// soon instead of waiting for the resync.
	Requeue bool
	Errs    []error
}

type volumeState struct {
	Name, Mode, State string
	// StaleOpen: QEMU holds a device or file that is no longer the
	// volume's (ObservedVolume.StaleOpen).
	StaleOpen bool
}

type opReport struct {
	Op     outcome.Op
	Name   string
	Result outcome.Result
	Took   time.Duration
	Err    error
}

// event is one Event on the VMI. A Once event is a Warning that is not
// sent again while its last message for the same volume and reason is
// unchanged: a resync must not repeat it every minute.
type event struct {
	Volume, Type, Reason, Message string
	Once                          bool
	// Refusal is counted in the refusal metric when the event is sent.
	Refusal *kubevirt.Refusal
}

func (e event) key() string { return onceKey(e.Volume, e.Reason) }

func onceKey(volume, reason string) string { return volume + "/" + reason }

// statusUpdate is the new phase, reason and message of one volumeStatus
// entry.
type statusUpdate struct {
	Phase, Reason, Message string
}

// summarize decides what a pass means. It is pure: no I/O, no agent state.
func summarize(in summaryInput) summary {
	s := summary{Sizes: map[string]GrowResult{}, Status: map[string]statusUpdate{}, Capacity: map[string]int64{}}
	attaches := map[string]applied{}
	for _, r := range in.Applied {
		if r.Op.Kind == outcome.Grow && r.Canceled {
			continue // stopping: the check says nothing about the volume
		}
		s.Ops = append(s.Ops, opReport{Op: r.Op.Kind, Name: r.Op.Name, Result: r.Result, Took: r.Took, Err: r.Err})
		if r.Result == outcome.Abandoned {
			if r.Op.Kind == outcome.Attach || r.Op.Kind == outcome.Verify {
				attaches[r.Op.Name] = r
			}
			s.abandoned(r)
			continue
		}
		switch r.Op.Kind {
		case outcome.Detach:
			s.detached(in, r)
		case outcome.Attach, outcome.Verify:
			attaches[r.Op.Name] = r
			s.attached(r)
		case outcome.Grow:
			s.grown(in, r)
		}
	}
	if in.VMI == nil {
		return s
	}
	for i := range in.Intents {
		r, ok := attaches[in.Intents[i].Name]
		var rp *applied
		if ok {
			rp = &r
		}
		s.volume(in, &in.Intents[i], rp)
		s.staleOpen(findObserved(in.Observed, in.Intents[i].Name))
	}
	return s
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
		if r.Result.Changed() {
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
