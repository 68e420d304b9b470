// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import "time"

// Observer receives what the agent does, for metrics. Every method must be
// cheap and must not block; the agent calls them from its workers.
type Observer interface {
	// OpAttempt is one engine call: op is attach, detach, verify or grow;
	// result is the Change, "not-published" or "error".
	OpAttempt(op, result string, d time.Duration)
	// Reconciled is one completed reconcile of one VMI.
	Reconciled(d time.Duration)
	// SnapshotTaken is one read of the host mount table: the mounts read,
	// the lines that could not be parsed and were left out, the time.
	SnapshotTaken(entries, unparsed int, d time.Duration)
	// VolumeState is the current state of one hotplug volume: one of the
	// State* constants.
	VolumeState(namespace, vmi, volume, mode, state string)
	// VolumeClaim is the PersistentVolumeClaim of one hotplug volume, to
	// join its series with the kubelet's and kube-state-metrics' volume
	// series; reported before VolumeState when the volume names one.
	VolumeClaim(namespace, vmi, volume, claim string)
	// VolumeStaleOpen is whether the launcher's QEMU holds a device or
	// file that is no longer the volume's (ObservedVolume.StaleOpen); it
	// is reported with every state but StateUnmounted.
	VolumeStaleOpen(namespace, vmi, volume string, stale bool)
	// VolumeSizes reports the sizes found by a growth check.
	VolumeSizes(namespace, vmi, volume string, r GrowResult)
	// Expansion is the outcome of a growth check: grown, unchanged, failed
	// or shrink-ignored.
	Expansion(result string)
	// Refusal counts one refused volume or launcher by reason.
	Refusal(reason string)
	// AttachLatency is the time from the VMI change that made a volume
	// desired to the volume being usable in its launcher.
	AttachLatency(mode string, d time.Duration)
	// AttachPhase is one phase of one volume's attach: phase is one of
	// AttachPhases, d the time from the end of the phase before it to its
	// own end. A phase whose start or end is unknown, or whose end is
	// before its start (another clock, a pod's transition that moved), is
	// not reported.
	AttachPhase(phase string, d time.Duration)
	// ForgetVMI drops every series of a VMI that is gone from this node.
	ForgetVMI(namespace, vmi string)
	// Migration is one step of a live migration seen from this node: one
	// of the Migration* events. For MigrationTargetReady, d is the time
	// from the handoff being seen to every hotplug volume being usable in
	// the target launcher; otherwise 0.
	Migration(event string, d time.Duration)
	// GoneCheck is one live read confirming that a VMI missing from the
	// caches left this node before anything of it is detached: one of
	// the Gone* results (gone.go).
	GoneCheck(result string)
}

// Volume states reported to Observer.VolumeState.
const (
	StateMounted   = "mounted"
	StatePending   = "pending"
	StateRefused   = "refused"
	StateFailed    = "failed"
	StateUnmounted = "unmounted"
	// StateNotPropagated: mounted on the host, not seen by the launcher.
	StateNotPropagated = "not-propagated"
)

// Expansion results reported to Observer.Expansion.
const (
	ExpansionGrown         = "grown"
	ExpansionUnchanged     = "unchanged"
	ExpansionFailed        = "failed"
	ExpansionShrinkIgnored = "shrink-ignored"
)

// Migration events reported to Observer.Migration.
const (
	// MigrationHandoff: a migration whose target launcher is on this node
	// was handed off (status.migrationState names it).
	MigrationHandoff = "handoff"
	// MigrationTargetReady: every hotplug volume is usable in the target
	// launcher.
	MigrationTargetReady = "target-ready"
	// MigrationTargetCleaned: the target launcher of a failed or aborted
	// migration holds nothing of the VMI any more.
	MigrationTargetCleaned = "target-cleaned"
	// MigrationTargetLeft: all that the target launcher of a failed or
	// aborted migration still holds is virt-handler's to remove: its
	// record names the binds its cleanup left there (kubevirt#17882).
	MigrationTargetLeft = "target-left"
	// MigrationSourceCleaned: after the VMI left for its target, the
	// source launcher is gone and holds nothing any more.
	MigrationSourceCleaned = "source-cleaned"
)

// MigrationEvents lists every migration event.
var MigrationEvents = []string{MigrationHandoff, MigrationTargetReady, MigrationTargetCleaned, MigrationTargetLeft, MigrationSourceCleaned}

// Attach phases reported to Observer.AttachPhase, in order. Each ends at
// the moment its name says and starts where the one before it ended; the
// first starts at the arrival of the VMI change that made the volume
// desired (the start of Observer.AttachLatency).
const (
	// AttachPhasePodCreated ends at the attachment pod's creationTimestamp
	// (the API server's clock).
	AttachPhasePodCreated = "pod-created"
	// AttachPhasePodReady ends when its Ready condition turned true (the
	// kubelet's clock): virt-controller names the pod in volumeStatus
	// (attachPodUID), from which the agent finds it, only once its
	// container is ready.
	AttachPhasePodReady = "pod-ready"
	// AttachPhasePublishSeen ends when an attach of the volume from that
	// pod first found the kubelet's publish (did not wait for it).
	AttachPhasePublishSeen = "publish-seen"
	// AttachPhaseMounted ends when the pass that made the volume usable in
	// the launcher finished its engine calls.
	AttachPhaseMounted = "mounted"
	// AttachPhaseLauncherReady ends when the agent saw the volume's
	// volumeStatus phase Ready, which virt-handler sets once the disk is in
	// the launcher's domain: the VMI change's arrival.
	AttachPhaseLauncherReady = "launcher-ready"
)

// AttachPhases lists every attach phase, in order.
var AttachPhases = []string{AttachPhasePodCreated, AttachPhasePodReady, AttachPhasePublishSeen, AttachPhaseMounted, AttachPhaseLauncherReady}

// NopObserver ignores everything.
type NopObserver struct{}

var _ Observer = NopObserver{}

func (NopObserver) OpAttempt(string, string, time.Duration)            {}
func (NopObserver) Reconciled(time.Duration)                           {}
func (NopObserver) SnapshotTaken(int, int, time.Duration)              {}
func (NopObserver) VolumeState(string, string, string, string, string) {}
func (NopObserver) VolumeClaim(string, string, string, string)         {}
func (NopObserver) VolumeStaleOpen(string, string, string, bool)       {}
func (NopObserver) VolumeSizes(string, string, string, GrowResult)     {}
func (NopObserver) Expansion(string)                                   {}
func (NopObserver) Refusal(string)                                     {}
func (NopObserver) AttachLatency(string, time.Duration)                {}
func (NopObserver) AttachPhase(string, time.Duration)                  {}
func (NopObserver) ForgetVMI(string, string)                           {}
func (NopObserver) Migration(string, time.Duration)                    {}
func (NopObserver) GoneCheck(string)                                   {}
