// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/outcome"
)

// attachTimes are the times of one volume's attach seen after its start
// (vmiState.wanted), all from the world: apply's end of the pass and the
// arrival of VMI changes, never a clock read here.
type attachTimes struct {
	// Pod is the attachment pod whose publish was seen, Published when an
	// attach from it first found the publish. A replaced pod's is dropped:
	// the volume is mounted from the pod it names then.
	Pod       types.UID
	Published time.Time
	// Mounted is when the volume became usable; zero until then. From
	// then on only the launcher's Ready is waited for.
	Mounted time.Time
}

// attachTiming is what one pass measured of one volume's attach: the
// total (negative when unknown) and the phases whose both ends it knows.
type attachTiming struct {
	Volume, Mode string
	Total        time.Duration
	Phases       []phaseTime
}

type phaseTime struct {
	Phase string
	Took  time.Duration
}

// attachPhasesMarker starts the phases in a VolumeMounted Event's message,
// which hpmount diag reads back (docs/diag.md "Last attach").
const attachPhasesMarker = "attach phases: "

// timeAttaches measures the attaches of the served launcher's volumes,
// each from the start noteWanted gave it. It records when an attach first
// found the kubelet's publish, and at the pass that made a volume usable
// returns its total and phases up to mounted, and names them in its
// VolumeMounted Event in s; a later pass that sees the launcher's Ready
// returns the last phase. finished is when the pass's engine calls
// returned.
func timeAttaches(st *vmiState, d decision, s *summary, done []applied, finished time.Time) []attachTiming {
	var out []attachTiming
	for i := range d.Intents {
		it := &d.Intents[i]
		if t, ok := timeAttach(st, it, d, volumeStateOf(s.Volumes, it.Name), attachOf(done, it.Name), finished); ok {
			out = append(out, t)
			if t.Total >= 0 {
				s.notePhases(it.Name, t)
			}
		}
	}
	return out
}

// timeAttach advances the measure of one volume's attach; ok when it
// has something to report.
func timeAttach(st *vmiState, it *volumeIntent, d decision, state string, r *applied, finished time.Time) (attachTiming, bool) {
	name := it.Name
	start, measuring := st.wanted[name]
	at := st.attach[name]
	switch {
	case state == StateRefused || state == StateUnmounted:
		delete(st.wanted, name)
		delete(st.attach, name)
		return attachTiming{}, false
	case measuring:
		if r != nil && publishSeen(*r) && (at.Published.IsZero() || at.Pod != it.AttachPodUID) {
			// The call began at most its own time before the end of the
			// pass's calls.
			at = attachTimes{Pod: it.AttachPodUID, Published: finished.Add(-r.Took)}
		}
		if state != StateMounted {
			setAttach(st, name, at)
			return attachTiming{}, false
		}
		delete(st.wanted, name)
		t := attachTiming{Volume: name, Mode: string(it.Desired.Mode), Total: finished.Sub(start)}
		published := at.Published
		if at.Pod != it.AttachPodUID {
			published = time.Time{}
		}
		t.Phases = phasesBetween(start, created(it.AttachPod), readyAt(it.AttachPod), published, finished)
		if d.Target {
			// virt-handler on the source owns volumeStatus while the
			// migration runs: its Ready is not this launcher's.
			delete(st.attach, name)
		} else {
			setAttach(st, name, attachTimes{Pod: it.AttachPodUID, Mounted: finished})
		}
		return t, true
	case !at.Mounted.IsZero() && it.Status != nil && it.Status.Phase == kubevirt.PhaseReady:
		delete(st.attach, name)
		t := attachTiming{Volume: name, Mode: string(it.Desired.Mode), Total: -1}
		if took := d.Arrived.Sub(at.Mounted); took >= 0 {
			t.Phases = []phaseTime{{AttachPhaseLauncherReady, took}}
		}
		return t, len(t.Phases) > 0
	}
	return attachTiming{}, false
}

// phasesBetween returns the phases between consecutive times, in the
// order of AttachPhases: only those whose both ends are known and in
// order. Times come from three clocks (the agent's, the API server's, the
// kubelet's), so a phase across two of them can come out negative.
func phasesBetween(times ...time.Time) []phaseTime {
	var out []phaseTime
	for i := 1; i < len(times) && i <= len(AttachPhases); i++ {
		from, to := times[i-1], times[i]
		if from.IsZero() || to.IsZero() || to.Before(from) {
			continue
		}
		out = append(out, phaseTime{AttachPhases[i-1], to.Sub(from)})
	}
	return out
}

// publishSeen reports whether an attach or verify got past waiting for
// the kubelet's publish: it made or kept the mount, or failed after
// finding the source.
func publishSeen(r applied) bool {
	switch r.Result {
	case outcome.NotPublished, outcome.Refused, outcome.Abandoned:
		return false
	}
	return !r.Canceled
}

func created(p *corev1.Pod) time.Time {
	if p == nil {
		return time.Time{}
	}
	return p.CreationTimestamp.Time
}

// readyAt is when the pod's Ready condition last turned true; zero while
// it is not true or unknown.
func readyAt(p *corev1.Pod) time.Time {
	if p == nil {
		return time.Time{}
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time
		}
	}
	return time.Time{}
}

func setAttach(st *vmiState, name string, at attachTimes) {
	if at == (attachTimes{}) {
		delete(st.attach, name)
		return
	}
	if st.attach == nil {
		st.attach = map[string]attachTimes{}
	}
	st.attach[name] = at
}

// notePhases names the phases of an attach in the volume's VolumeMounted
// Event of this pass, if one is sent.
func (s *summary) notePhases(volume string, t attachTiming) {
	for i := range s.Events {
		e := &s.Events[i]
		if e.Volume == volume && e.Reason == EventVolumeMounted {
			e.Message += "; " + phasesText(t)
		}
	}
}

// phasesText is "attach phases: pod-created 1s, ..., mounted 12ms (total
// 3.2s)": the phases measured, rounded to the millisecond.
func phasesText(t attachTiming) string {
	parts := make([]string, 0, len(t.Phases))
	for _, p := range t.Phases {
		parts = append(parts, p.Phase+" "+p.Took.Round(time.Millisecond).String())
	}
	known := strings.Join(parts, ", ")
	if known == "" {
		known = "none known"
	}
	return fmt.Sprintf("%s%s (total %s)", attachPhasesMarker, known, t.Total.Round(time.Millisecond))
}

func volumeStateOf(vs []volumeState, name string) string {
	for _, v := range vs {
		if v.Name == name {
			return v.State
		}
	}
	return ""
}

// attachOf is the volume's attach or verify of this pass, nil if none.
func attachOf(done []applied, name string) *applied {
	for i := range done {
		if r := &done[i]; r.Op.Name == name && (r.Op.Kind == outcome.Attach || r.Op.Kind == outcome.Verify) {
			return r
		}
	}
	return nil
}
