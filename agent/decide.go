// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"log/slog"
	"maps"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/kubevirt"
)

// decision is what one pass wants, decided from the world alone: the
// launcher to serve and its volumes' intents, the launchers to empty and
// the ones to leave alone, and the remembered state as it stands before
// the node is looked at.
type decision struct {
	Key, Namespace, Name string
	// Ref is the VMI the pass's Events are about; nil when there is
	// nothing to report on.
	Ref *corev1.ObjectReference
	// State is the next remembered state; nil leaves memory as it is.
	State *vmiState
	// Logs and Events (launcher refused, launcher chosen) go out first.
	Logs   []logLine
	Events []event
	// ClearRefusal: a launcher qualified, so the VMI's refusal Warning may
	// be sent again once the launcher is refused again.
	ClearRefusal bool
	// Handoff: this pass first saw a handoff to a launcher of this node.
	Handoff bool
	// Pending: no launcher to attach to and nothing to clean; every
	// hotplug volume is pending.
	Pending []volumeState
	// Gone: the VMI is in neither cache. ConfirmGone: launchers are to be
	// emptied once the API server confirms it (gone.go).
	Gone, ConfirmGone bool
	// Clean are the launchers to empty: gone or terminated ones, the
	// abandoned targets of a failed migration, all of a gone VMI's.
	// Abandoned are among them; Held stay as they are (heldForHandoff).
	Clean, Abandoned, Held []types.UID
	// PodGone are the launchers to empty whose pod is gone from the
	// cache.
	PodGone []types.UID
	// Launcher is the launcher to serve, VMI the VMI as it is judged for
	// it (kubevirt.Placement.VMI), Intents its hotplug volumes.
	Launcher *corev1.Pod
	VMI      *kubevirt.VMI
	Intents  []volumeIntent
	// Compute names the launcher and its compute container.
	Compute string
	// Target: Launcher is the target of a migration still running, whose
	// volumeStatus virt-handler on the source owns.
	Target bool
	// WriteStatus asks for volumeStatus updates.
	WriteStatus bool
	// Resync: the periodic pass; VerifyRules: world.VerifyRules.
	Resync, VerifyRules bool
	GrowFilesystems     bool
	Arrived             time.Time
	Node                string
}

// logLine is one log record a pass asks report to write, on the VMI's
// logger.
type logLine struct {
	Level slog.Level
	Msg   string
	Attrs []any
}

// decide turns the world into what the pass wants. It is pure: it reads
// only w, and w's caches through their lookups.
func decide(w world) decision {
	d := decision{Key: w.Key, Namespace: w.Namespace, Name: w.Name, Resync: w.Resync, VerifyRules: w.VerifyRules, GrowFilesystems: w.GrowFilesystems, Arrived: w.Arrived, Node: w.Node}
	switch {
	case w.DecodeErr != nil:
		// Retrying cannot help until the object changes, which enqueues it.
		d.Logs = []logLine{{slog.LevelError, "cannot decode vmi", []any{"error", w.DecodeErr.Error()}}}
		return d
	case w.VMI == nil && w.Remembered == nil:
		return d
	case w.VMI == nil:
		d.State, d.Gone = w.Remembered.clone(), true
		d.Ref = vmiRef(w.Namespace, w.Name, d.State.uid, "")
		d.Clean, d.Held = heldForHandoff(d.State, w.Pods)
		d.ConfirmGone = len(d.Clean) > 0
		d.PodGone = podsGone(d.Clean, w.Pods)
		return d
	}
	vmi := w.VMI
	d.State = stateFor(w.Remembered, vmi.UID)
	d.Ref = vmiRef(vmi.Namespace, vmi.Name, vmi.UID, vmi.ResourceVersion)
	d.place(w, kubevirt.Place(vmi, w.Node, w.Pods, slices.Sorted(maps.Keys(d.State.launchers))))
	return d
}

// place turns what the ownership rules say about the VMI on this node into
// the pass's wants: the migration remembered, the launcher chosen or
// refused, the launchers to empty, and the volumes' intents.
func (d *decision) place(w world, p kubevirt.Placement) {
	d.Handoff = noteMigration(d.State, p.Migration, w.Now)
	if p.Refusal != nil {
		d.Events = append(d.Events, refusalEvent("", p.Refusal))
	}
	if p.Why != "" {
		d.Events = append(d.Events, event{Type: corev1.EventTypeNormal, Reason: EventLauncherChosen, Message: p.Why, Once: true})
	}
	d.Abandoned = p.AbandonedUIDs
	d.Clean = staleLaunchers(d.State, p.Launcher, d.Abandoned, w.Pods)
	d.PodGone = podsGone(d.Clean, w.Pods)
	if l := p.Launcher; l != nil {
		d.State.launchers[l.UID] = true
		d.ClearRefusal, d.Launcher, d.VMI, d.Target = true, l, p.VMI, p.Target
		d.Compute = string(l.UID) + " " + p.ComputeID
		d.WriteStatus = w.ReportVolumeStatus && !d.Target
		d.Intents = buildIntents(p, w.Claims)
		return
	}
	if len(d.Clean) == 0 {
		// No launcher to attach to and nothing to clean.
		for _, v := range p.Volumes {
			d.Pending = append(d.Pending, volumeState{Name: v.Name, Mode: string(v.Mode), State: StatePending, Claim: v.Claim})
		}
	}
}

// involved lists the launchers whose hotplug-disks the pass looks at.
func (d *decision) involved() []types.UID {
	out := slices.Clone(d.Clean)
	if d.Launcher != nil {
		out = append(out, d.Launcher.UID)
	}
	return out
}

// stateFor returns the state to go on from: a copy of what is remembered
// of the key, or a new one. A new VMI under the same name keeps only the
// launchers still to be cleaned.
func stateFor(remembered *vmiState, uid types.UID) *vmiState {
	st := newVMIState()
	if remembered != nil {
		st = remembered.clone()
	}
	if st.uid != uid {
		launchers := st.launchers
		st = newVMIState()
		st.launchers, st.uid = launchers, uid
	}
	return st
}

func newVMIState() *vmiState {
	return &vmiState{
		launchers: map[types.UID]bool{},
		capacity:  map[string]int64{},
		warned:    map[string]string{},
		wanted:    map[string]time.Time{},
	}
}

// clone copies the state, so that a pass can build the next one without
// touching what is remembered until report stores it.
func (st *vmiState) clone() *vmiState {
	c := *st
	c.launchers = maps.Clone(st.launchers)
	c.capacity = maps.Clone(st.capacity)
	c.busy = maps.Clone(st.busy)
	c.warned = maps.Clone(st.warned)
	c.wanted = maps.Clone(st.wanted)
	c.attach = maps.Clone(st.attach)
	return &c
}

// noteMigration remembers node's part in the VMI's migration, and reports
// whether this is the first sight of a handoff to this node.
func noteMigration(st *vmiState, m kubevirt.Migration, now time.Time) bool {
	if m.UID != st.migration.UID {
		st.migration = migrationState{Migration: m}
		if m.Role == kubevirt.RoleTarget && m.Phase == kubevirt.MigrationRunning {
			st.migration.handoff = now
			return true
		}
		return false
	}
	st.migration.Migration = m
	return false
}

// staleLaunchers lists the launchers to empty: those remembered for the
// VMI, other than the current one, that are gone from this node or have
// terminated, and the abandoned targets of a failed migration.
func staleLaunchers(st *vmiState, current *corev1.Pod, abandoned []types.UID, pods kubevirt.PodLookup) []types.UID {
	stale := slices.Clone(abandoned)
	for _, uid := range slices.Sorted(maps.Keys(st.launchers)) {
		if current != nil && uid == current.UID || slices.Contains(stale, uid) {
			continue
		}
		if pod, ok := pods.PodByUID(uid); !ok || kubevirt.PodTerminated(pod) {
			stale = append(stale, uid)
		}
	}
	return stale
}

// podsGone lists the launchers whose pod the cache no longer has.
func podsGone(launchers []types.UID, pods kubevirt.PodLookup) []types.UID {
	var gone []types.UID
	for _, uid := range launchers {
		if _, ok := pods.PodByUID(uid); !ok {
			gone = append(gone, uid)
		}
	}
	return gone
}

// heldForHandoff splits the launchers of a VMI that left this node's
// caches. After the VMI left for its migration target, the source
// launcher's QEMU hands over until the pod stops, so its mounts stay
// until it is gone or terminated; a VMI that left any other way (deleted,
// or its migration to this node failed) is cleaned at once.
func heldForHandoff(st *vmiState, pods kubevirt.PodLookup) (clean, held []types.UID) {
	uids := slices.Sorted(maps.Keys(st.launchers))
	m := st.migration
	if m.Role != kubevirt.RoleSource || m.Ended() {
		return uids, nil
	}
	for _, uid := range uids {
		if pod, ok := pods.PodByUID(uid); ok && !kubevirt.PodTerminated(pod) {
			held = append(held, uid)
			continue
		}
		clean = append(clean, uid)
	}
	return clean, held
}

// volumeIntent is the agent's view of one hotpluggable volume of the VMI:
// what the ownership rules say (kubevirt.HotplugVolume) plus what the
// engine needs to attach it.
type volumeIntent struct {
	kubevirt.HotplugVolume
	Desired DesiredVolume
	// Attachable: the attachment pod is verified and the PV is known, so
	// Attach may be called.
	Attachable bool
	// Transient is an API error that should retry the reconcile.
	Transient error
}

// pvResolver maps a claim to its bound PV name.
type pvResolver func(namespace, claim string) (string, error)

// buildIntents computes the intent for every hotpluggable volume of a
// placement with a verified launcher.
func buildIntents(p kubevirt.Placement, resolve pvResolver) []volumeIntent {
	var out []volumeIntent
	for _, hv := range p.Volumes {
		in := volumeIntent{HotplugVolume: hv, Desired: DesiredVolume{
			Name:               hv.Name,
			Mode:               hv.Mode,
			LauncherUID:        p.Launcher.UID,
			ComputeContainerID: p.ComputeID,
			CapacityBytes:      hv.CapacityBytes,
			FilesystemOverhead: hv.FilesystemOverhead,
			Source:             Source{AttachmentPodUID: hv.AttachPodUID},
		}}
		if hv.AttachPod != nil {
			pv, err := resolve(p.VMI.Namespace, hv.Claim)
			if err != nil {
				in.Transient, in.Pending = err, err.Error()
			} else {
				in.Desired.Source.PVName, in.Attachable = pv, true
			}
		}
		out = append(out, in)
	}
	return out
}

func vmiRef(ns, name string, uid types.UID, rv string) *corev1.ObjectReference {
	return &corev1.ObjectReference{
		APIVersion:      kubevirt.VMIAPIVersion,
		Kind:            kubevirt.VMIKind,
		Namespace:       ns,
		Name:            name,
		UID:             uid,
		ResourceVersion: rv,
	}
}
