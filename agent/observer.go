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
	// MigrationSourceCleaned: after the VMI left for its target, the
	// source launcher is gone and holds nothing any more.
	MigrationSourceCleaned = "source-cleaned"
)

// MigrationEvents lists every migration event.
var MigrationEvents = []string{MigrationHandoff, MigrationTargetReady, MigrationTargetCleaned, MigrationSourceCleaned}

// NopObserver ignores everything.
type NopObserver struct{}

var _ Observer = NopObserver{}

func (NopObserver) OpAttempt(string, string, time.Duration)            {}
func (NopObserver) Reconciled(time.Duration)                           {}
func (NopObserver) SnapshotTaken(int, int, time.Duration)              {}
func (NopObserver) VolumeState(string, string, string, string, string) {}
func (NopObserver) VolumeStaleOpen(string, string, string, bool)       {}
func (NopObserver) VolumeSizes(string, string, string, GrowResult)     {}
func (NopObserver) Expansion(string)                                   {}
func (NopObserver) Refusal(string)                                     {}
func (NopObserver) AttachLatency(string, time.Duration)                {}
func (NopObserver) ForgetVMI(string, string)                           {}
func (NopObserver) Migration(string, time.Duration)                    {}
func (NopObserver) GoneCheck(string)                                   {}
