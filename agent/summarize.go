// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

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
	EventDeviceRuleRestored = "DeviceRuleRestored"
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
	// Busy counts, per volume, the growth checks in a row that had to wait
	// (ErrBusy).
	Busy map[string]int
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
	// Busy is the new count of growth checks in a row that waited, per
	// volume whose check ran (0: it did not wait).
	Busy map[string]int
	// Requeue: something was attached; check it against a fresh snapshot
	// soon instead of waiting for the resync.
	Requeue bool
	// RequeueIn, when not 0: a probe of a volume's storage is still out;
	// a pass after this long finds its answer (ObservedVolume.Answering).
	RequeueIn time.Duration
	Errs      []error
	// LogAttrs name what the summary is about in its logs (a launcher
	// emptied), beside the VMI.
	LogAttrs []any
	// LeftToHandler: a target was left to virt-handler to remove, so
	// its launcher is not clean yet.
	LeftToHandler bool
}

type volumeState struct {
	Name, Mode, State string
	// Claim is the volume's PersistentVolumeClaim, "" if unknown.
	Claim string
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

// passReport is everything one pass has to say, in the order report says
// it, and the state to remember after it.
type passReport struct {
	Key, Namespace, Name string
	Ref                  *corev1.ObjectReference
	// Logs come first; Closing after the summaries, saying how the pass
	// ended.
	Logs, Closing []logLine
	// Parts are the pass's summaries in order: what was decided, each
	// launcher emptied, the served launcher, the migration's steps.
	Parts      []summary
	Migrations []migrationStep
	// GoneCheck is the result of confirming a gone VMI, "" if none ran.
	GoneCheck string
	Read      *snapshotRead
	// Pending volumes: no launcher to attach to.
	Pending []volumeState
	// State is the state to remember; Forget drops the key instead.
	State  *vmiState
	Forget bool
	// GrowthLauncher and GrowthKeep name the served launcher and its
	// hotplug volumes: finished growth checks of anything else are
	// dropped.
	GrowthLauncher types.UID
	GrowthKeep     map[string]bool
	// Attaches are the attach latencies and phases measured.
	Attaches []attachTiming
	// Started is when the pass began, for the reconcile's duration.
	Started time.Time
	// Requeue asks for another pass that soon, when not 0.
	Requeue time.Duration
	Status  map[string]statusUpdate
	Errs    []error
}

// migrationStep is one step of a migration for the Observer.
type migrationStep struct {
	Event string
	Took  time.Duration
}

// summarizePass decides what the whole pass means. It is pure: the state
// it returns is its own copy of the decision's.
func summarizePass(d decision, o observation, done passApplied) passReport {
	r := passReport{Key: d.Key, Namespace: d.Namespace, Name: d.Name, Ref: d.Ref, Logs: slices.Clone(d.Logs), Read: o.Read}
	if d.State == nil {
		return r
	}
	r.State = d.State.clone()
	r.Parts = append(r.Parts, summary{Events: d.Events})
	if d.Gone {
		r.gone(d, o, done)
		return r
	}
	if d.ClearRefusal {
		r.Parts = append(r.Parts, summary{Cleared: []string{onceKey("", EventHotplugRefused)}})
	}
	if d.Handoff {
		m := r.State.migration
		r.Migrations = append(r.Migrations, migrationStep{Event: MigrationHandoff})
		r.Logs = append(r.Logs, logLine{slog.LevelInfo, "migration handed off to this node", []any{"migration", string(m.UID), "source", m.SourceNode, "targetPod", m.TargetPod}})
	}
	if d.Launcher == nil && len(d.Clean) == 0 {
		r.Pending = d.Pending
		return r
	}
	if o.SnapErr != nil {
		r.Errs = append(r.Errs, o.SnapErr)
		return r
	}
	if o.HandlerErr != nil {
		// Nothing was detached: whose the targets are is unknown.
		r.Errs = append(r.Errs, o.HandlerErr)
	}
	r.Errs = append(r.Errs, r.cleaned(d, o, done)...)
	r.targetCleaned(d, done)
	if d.Launcher != nil {
		r.served(d, o, done)
	}
	return r
}

// gone finishes the pass of a VMI that left the caches: its launchers
// are emptied once that is confirmed, and it is forgotten once none is
// left to empty or held for a handoff.
func (r *passReport) gone(d decision, o observation, done passApplied) {
	if d.ConfirmGone {
		r.GoneCheck = o.Gone
		if !goneAllowsDetach(o.Gone) {
			r.Logs = append(r.Logs, goneLog(o.Gone, o.GoneErr))
			r.Requeue = goneRecheck
			return
		}
		if o.SnapErr != nil {
			r.Errs = append(r.Errs, o.SnapErr)
			return
		}
		if errs := r.cleaned(d, o, done); len(errs) > 0 {
			r.Errs = append(r.Errs, errors.Join(errs...))
			return
		}
	}
	if len(d.Held) > 0 {
		// The pod's end, or the resync, brings the key back.
		r.Closing = append(r.Closing, logLine{slog.LevelDebug, "vmi left for its migration target; the source launcher keeps its mounts until it stops", []any{"launchers", len(d.Held)}})
		return
	}
	if m := r.State.migration; m.Role == kubevirt.RoleSource && !m.Ended() && len(d.Clean) > 0 {
		r.Migrations = append(r.Migrations, migrationStep{Event: MigrationSourceCleaned})
		var s summary
		s.normal("", EventMigrationSourceCleaned, fmt.Sprintf("The VMI left node %s for %s (migration %s) and its source virt-launcher pod, now gone, holds nothing of its hotplug volumes",
			d.Node, m.TargetNode, m.UID))
		r.Parts = append(r.Parts, s)
	}
	r.Closing = append(r.Closing, logLine{slog.LevelInfo, "vmi gone from node, forgetting it", nil})
	r.Forget = true
}

// cleaned summarizes each launcher emptied, in the decision's order, and
// forgets each one that is clean.
func (r *passReport) cleaned(d decision, o observation, done passApplied) []error {
	var errs []error
	for _, uid := range d.Clean {
		ol := o.Clean[uid]
		if ol.Err != nil {
			errs = append(errs, ol.Err)
			continue
		}
		s := summarize(summaryInput{Observed: ol.Volumes, Applied: done.Done[uid]})
		s.LogAttrs = []any{"launcher", string(uid)}
		r.Parts = append(r.Parts, s)
		if err := errors.Join(s.Errs...); err != nil {
			errs = append(errs, err)
			continue
		}
		if s.LeftToHandler {
			continue // looked at again until virt-handler removed it
		}
		delete(r.State.launchers, uid)
	}
	return errs
}

// targetCleaned sends one Event per migration about its abandoned target
// launchers: MigrationTargetCleaned once they hold nothing of the VMI's
// without an error, or MigrationTargetLeft once all they hold is virt-
// handler's to remove, where its record names its own binds that its
// cleanup left there (kubevirt#17882).
func (r *passReport) targetCleaned(d decision, done passApplied) {
	m := &r.State.migration
	if m.cleaned || len(d.Abandoned) == 0 {
		return
	}
	var left []string
	for _, uid := range d.Abandoned {
		if !r.State.launchers[uid] {
			continue
		}
		names := leftToHandlerIn(done.Done[uid])
		if len(names) == 0 {
			return // not clean yet
		}
		left = append(left, names...)
	}
	m.cleaned = true
	var s summary
	if left == nil {
		r.Migrations = append(r.Migrations, migrationStep{Event: MigrationTargetCleaned})
		s.normal("", EventMigrationTargetCleaned, fmt.Sprintf("Migration %s %s: its target virt-launcher pod on node %s holds nothing of the VMI's hotplug volumes",
			m.UID, m.Phase, m.TargetNode))
	} else {
		r.Migrations = append(r.Migrations, migrationStep{Event: MigrationTargetLeft})
		s.warn("", EventMigrationTargetLeft, fmt.Sprintf("Migration %s %s: its target virt-launcher pod on node %s still holds hotplug volumes %s, which virt-handler bound and records; "+
			"its cleanup left them there (kubevirt#17882), and hpmount leaves them to virt-handler, which removes them should the VMI migrate to that node again. "+
			"Until then a Filesystem volume keeps that pod from finishing its deletion",
			m.UID, m.Phase, m.TargetNode, strings.Join(left, ", ")))
	}
	r.Parts = append(r.Parts, s)
}

// leftToHandlerIn names the detaches of a launcher that were left to
// virt-handler, nil if any other detach did not remove its volume.
func leftToHandlerIn(done []applied) []string {
	var left []string
	for _, a := range done {
		switch a.Result {
		case outcome.LeftToHandler:
			left = append(left, a.Op.Name)
		case outcome.Removed:
		default:
			return nil
		}
	}
	return left
}

// served summarizes the pass of the served launcher.
func (r *passReport) served(d decision, o observation, done passApplied) {
	st := r.State
	pruneState(st, d.Intents)
	r.GrowthLauncher, r.GrowthKeep = d.Launcher.UID, map[string]bool{}
	for _, it := range d.Intents {
		r.GrowthKeep[it.Name] = true
	}
	if ref := o.Launcher.Refusal; ref != nil {
		// hotplug-disks itself is unsafe (a symlink, a parent that is
		// one): no volume can be served and retrying cannot help until it
		// is repaired; a resync looks again. The key names no volume.
		r.Parts = append(r.Parts, summary{Events: []event{refusalEvent(launcherDirKey, ref)}})
		return
	}
	if o.Launcher.Err != nil {
		r.Errs = append(r.Errs, o.Launcher.Err)
		return
	}
	if !slices.ContainsFunc(done.Done[d.Launcher.UID], func(a applied) bool { return a.Op.Kind == outcome.Verify && a.Result == outcome.Error }) {
		st.compute = d.Compute // else the retry verifies again
	}
	s := summarize(summaryInput{
		VMI: d.VMI, Intents: d.Intents, Observed: o.Launcher.Volumes, Applied: done.Done[d.Launcher.UID],
		ReportVolumeStatus: d.WriteStatus, LastCapacity: maps.Clone(st.capacity), Busy: maps.Clone(st.busy),
	})
	part := len(r.Parts)
	r.Parts = append(r.Parts, s)
	if d.Target {
		r.targetReady(d, s, done.Finished)
	}
	if s.Requeue {
		r.Requeue = time.Second
	}
	if s.RequeueIn > 0 && (r.Requeue == 0 || s.RequeueIn < r.Requeue) {
		r.Requeue = s.RequeueIn
	}
	if d.WriteStatus && len(s.Status) > 0 {
		r.Status = s.Status
	}
	r.Errs = append(r.Errs, s.Errs...)
	noteWanted(st, d.Intents, o.Launcher.Volumes, d.Arrived)
	// Last, as it names the phases in the part's VolumeMounted Events.
	r.Attaches = timeAttaches(st, d, &r.Parts[part], done.Done[d.Launcher.UID], done.Finished)
}

// targetReady sends MigrationTargetReady once per migration, when every
// hotplug volume of the target launcher is usable.
func (r *passReport) targetReady(d decision, s summary, now time.Time) {
	m := &r.State.migration
	intents := len(d.Intents)
	if m.ready || m.handoff.IsZero() || intents == 0 {
		return
	}
	mounted := 0
	for _, v := range s.Volumes {
		if v.State == StateMounted {
			mounted++
		}
	}
	if mounted < intents {
		return
	}
	m.ready = true
	took := now.Sub(m.handoff)
	r.Migrations = append(r.Migrations, migrationStep{Event: MigrationTargetReady, Took: took})
	var e summary
	e.normal("", EventMigrationTargetReady, fmt.Sprintf("All %d hotplug volumes are mounted in migration target virt-launcher pod %s, %s after the handoff of migration %s was seen",
		intents, d.Launcher.Name, took.Round(time.Millisecond), m.UID))
	r.Parts = append(r.Parts, e)
}

// pruneState drops remembered data of volumes that left the VMI: every
// volume with growth or latency data is a hotplug volume, so one without
// an intent left.
func pruneState(st *vmiState, intents []volumeIntent) {
	keep := make(map[string]bool, len(intents))
	for _, it := range intents {
		keep[it.Name] = true
	}
	maps.DeleteFunc(st.capacity, func(name string, _ int64) bool { return !keep[name] })
	maps.DeleteFunc(st.busy, func(name string, _ int) bool { return !keep[name] })
	maps.DeleteFunc(st.wanted, func(name string, _ time.Time) bool { return !keep[name] })
	maps.DeleteFunc(st.attach, func(name string, _ attachTimes) bool { return !keep[name] })
}

// noteWanted starts the attach latency of every volume that is desired but
// not usable yet, at the arrival of the VMI change being reconciled. A
// volume already usable when first seen (adopted after a restart) has none.
func noteWanted(st *vmiState, intents []volumeIntent, observed []ObservedVolume, arrived time.Time) {
	for i := range intents {
		it := &intents[i]
		if _, ok := st.wanted[it.Name]; ok || it.Refused != nil {
			continue
		}
		if !findObserved(observed, it.Name).Healthy(it.Desired.Mode) {
			st.wanted[it.Name] = arrived
		}
	}
}

// goneLog says why nothing of a VMI missing from the caches was detached.
func goneLog(result string, err error) logLine {
	if result == GoneStillHere {
		return logLine{slog.LevelInfo, "vmi is missing from the caches but still names this node; waiting for them before detaching anything", nil}
	}
	return logLine{slog.LevelWarn, "vmi is missing from the caches and the API server cannot confirm it left; nothing is detached", []any{"error", err.Error()}}
}

// summarize decides what a pass means. It is pure: no I/O, no agent state.
func summarize(in summaryInput) summary {
	s := summary{Sizes: map[string]GrowResult{}, Status: map[string]statusUpdate{}, Capacity: map[string]int64{}, Busy: map[string]int{}}
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

// refusalEvent reports a refusal. Its message leads with the reason code,
// the reason label under which hpmount_refusals_total counts it.
func refusalEvent(volume string, r *kubevirt.Refusal) event {
	return event{Volume: volume, Type: corev1.EventTypeWarning, Reason: EventHotplugRefused, Message: r.Error(), Once: true, Refusal: r}
}

func (s *summary) warn(volume, reason, msg string) {
	s.Events = append(s.Events, event{Volume: volume, Type: corev1.EventTypeWarning, Reason: reason, Message: msg, Once: true})
}

// warnEach is a Warning sent every time, not once: each is a new
// occurrence (the Event's count says how many).
func (s *summary) warnEach(volume, reason, msg string) {
	s.Events = append(s.Events, event{Volume: volume, Type: corev1.EventTypeWarning, Reason: reason, Message: msg})
}

func (s *summary) normal(volume, reason, msg string) {
	s.Events = append(s.Events, event{Volume: volume, Type: corev1.EventTypeNormal, Reason: reason, Message: msg})
}

func findObserved(obs []ObservedVolume, name string) *ObservedVolume {
	for i := range obs {
		if obs[i].Name == name {
			return &obs[i]
		}
	}
	return nil
}

func size(b int64) string {
	return resource.NewQuantity(b, resource.BinarySI).String()
}
