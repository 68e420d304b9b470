// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/kubevirt"
	kt "github.com/hpmount/hpmount/kubevirt/kubevirttest"
	"github.com/hpmount/hpmount/outcome"
)

// TestSummarize decides volume states, Events, status updates and metrics
// from what a pass did, with no engine and no agent.
func TestSummarize(t *testing.T) {
	vmi := kt.Decode(kt.VMIObject(kt.Vol{Name: "hp", Claim: "c1", AttachUID: kt.AttachUID}, kt.Vol{Name: "gone", Claim: "c9", AttachUID: kt.AttachUID}))
	fs := func(refused *kubevirt.Refusal) volumeIntent {
		return volumeIntent{
			HotplugVolume: kubevirt.HotplugVolume{Name: "hp", Mode: kubevirt.Filesystem, Status: vmi.Status.VolumeStatusByName("hp"), Refused: refused},
			Desired:       DesiredVolume{Name: "hp", Mode: kubevirt.Filesystem, CapacityBytes: 10 << 30},
			Attachable:    refused == nil,
		}
	}
	healthyFS := healthyObserved("hp", kubevirt.Filesystem)
	did := func(kind outcome.Op, it *volumeIntent, o *ObservedVolume, r outcome.Result, err error) applied {
		a := applied{Op: op{Kind: kind, Name: "hp", Intent: it, Observed: o}, Result: r, Err: err}
		if r == outcome.Refused {
			// The engine's refusal of tenant content, as node translates it.
			a.Refusal, a.Err = &kubevirt.Refusal{Reason: kubevirt.RefusedUnsafeContent, Message: "disk.img is a symlink"}, nil
		}
		return a
	}
	it := fs(nil)
	notSeenFS := healthyFS
	notSeenFS.NotPropagated = true
	uncheckedFS := healthyFS
	uncheckedFS.Unchecked = fmt.Errorf("ask the launcher: %w", ErrStuck)
	answeringFS := healthyFS
	answeringFS.Answering = 7 * time.Second
	notSeen := did(outcome.Attach, &it, nil, outcome.Mounted, nil)
	notSeen.NotPropagated = fmt.Errorf("%w: the launcher sees the empty file", ErrNotPropagated)
	detachGone := applied{Op: op{Kind: outcome.Detach, Name: "gone", Observed: &ObservedVolume{Name: "gone", Mode: kubevirt.Block}}, Result: outcome.Removed}
	tests := []struct {
		name     string
		in       summaryInput
		state    string   // of "hp"
		events   []string // "Type Reason"
		status   string   // phase of "hp", "" for none
		requeue  bool
		errs     int
		expanded []string
	}{
		{"fresh attach", summaryInput{Intents: []volumeIntent{it}, Applied: []applied{did(outcome.Attach, &it, nil, outcome.Mounted, nil)}},
			StateMounted, []string{"Normal VolumeMounted"}, kubevirt.PhaseMountedToPod, true, 0, nil},
		{"attached, the launcher does not see it", summaryInput{Intents: []volumeIntent{it}, Applied: []applied{notSeen}},
			StateNotPropagated, []string{"Warning VolumeNotPropagated"}, "", false, 0, nil},
		{"observed, the launcher does not see it", summaryInput{Intents: []volumeIntent{it}, Observed: []ObservedVolume{notSeenFS}},
			StateNotPropagated, []string{"Warning VolumeNotPropagated"}, "", false, 0, nil},
		{"observed, its check hung", summaryInput{Intents: []volumeIntent{it}, Observed: []ObservedVolume{uncheckedFS}},
			StateFailed, []string{"Warning HotplugStuck"}, "", false, 0, nil},
		{"observed while its storage probe is out", summaryInput{Intents: []volumeIntent{it}, Observed: []ObservedVolume{answeringFS}},
			StateMounted, nil, kubevirt.PhaseMountedToPod, false, 0, nil},
		{"healthy, nothing ran", summaryInput{Intents: []volumeIntent{it}, Observed: []ObservedVolume{healthyFS}},
			StateMounted, nil, kubevirt.PhaseMountedToPod, false, 0, nil},
		{"attach fails", summaryInput{Intents: []volumeIntent{it}, Applied: []applied{did(outcome.Attach, &it, nil, outcome.Error, errors.New("EIO"))}},
			StateFailed, []string{"Warning HotplugFailed"}, "", false, 1, nil},
		{"verify fails on a healthy volume", summaryInput{Intents: []volumeIntent{it}, Observed: []ObservedVolume{healthyFS},
			Applied: []applied{did(outcome.Verify, &it, &healthyFS, outcome.Error, errors.New("EIO"))}},
			StateMounted, []string{"Warning HotplugFailed"}, kubevirt.PhaseMountedToPod, false, 1, nil},
		{"not published, kept healthy", summaryInput{Intents: []volumeIntent{it}, Observed: []ObservedVolume{healthyFS},
			Applied: []applied{did(outcome.Verify, &it, &healthyFS, outcome.NotPublished, kubelet.ErrNotPublished)}},
			StateMounted, nil, kubevirt.PhaseMountedToPod, false, 0, nil},
		{"not published yet", summaryInput{Intents: []volumeIntent{it}, Applied: []applied{did(outcome.Attach, &it, nil, outcome.NotPublished, kubelet.ErrNotPublished)}},
			StateFailed, nil, "", false, 1, nil},
		{"engine refuses content", summaryInput{Intents: []volumeIntent{it}, Applied: []applied{did(outcome.Attach, &it, nil, outcome.Refused, nil)}},
			StateRefused, []string{"Warning HotplugRefused"}, "", false, 0, nil},
		{"refused by the rules", summaryInput{Intents: []volumeIntent{fs(&kubevirt.Refusal{Reason: kubevirt.RefusedAttachOwner, Message: "not ours"})}},
			StateRefused, []string{"Warning HotplugRefused"}, "", false, 0, nil},
		{"pending", summaryInput{Intents: []volumeIntent{{HotplugVolume: kubevirt.HotplugVolume{Name: "hp", Pending: "no pod"}, Desired: DesiredVolume{Name: "hp"}}}},
			StatePending, nil, "", false, 0, nil},
		{"transient api error", summaryInput{Intents: []volumeIntent{{HotplugVolume: kubevirt.HotplugVolume{Name: "hp"}, Desired: DesiredVolume{Name: "hp"}, Transient: errors.New("etcd")}}},
			StatePending, nil, "", false, 1, nil},
		{"grown", summaryInput{Intents: []volumeIntent{it}, Observed: []ObservedVolume{healthyFS},
			Applied: []applied{{Op: op{Kind: outcome.Grow, Name: "hp", Intent: &it, Observed: &healthyFS}, Result: outcome.Grown,
				Grow: GrowResult{FilesystemBefore: 1 << 30, FilesystemAfter: 2 << 30, FilesystemType: "xfs", Grown: true}}}},
			StateMounted, []string{"Normal FilesystemExpanded"}, kubevirt.PhaseMountedToPod, false, 0, []string{ExpansionGrown}},
		{"growth fails", summaryInput{Intents: []volumeIntent{it}, Observed: []ObservedVolume{healthyFS},
			Applied: []applied{{Op: op{Kind: outcome.Grow, Name: "hp", Intent: &it, Observed: &healthyFS}, Result: outcome.Error, Err: errors.New("EPERM")}}},
			StateMounted, []string{"Warning FilesystemExpansionFailed"}, kubevirt.PhaseMountedToPod, false, 0, []string{ExpansionFailed}},
		{"attach abandoned past its deadline", summaryInput{Intents: []volumeIntent{it},
			Applied: []applied{did(outcome.Attach, &it, nil, outcome.Abandoned, fmt.Errorf("stat: %w", ErrStuck))}},
			StateFailed, []string{"Warning HotplugStuck"}, "", false, 1, nil},
		{"verify abandoned on a healthy volume", summaryInput{Intents: []volumeIntent{it}, Observed: []ObservedVolume{healthyFS},
			Applied: []applied{did(outcome.Verify, &it, &healthyFS, outcome.Abandoned, fmt.Errorf("stat: %w", ErrStuck))}},
			StateMounted, []string{"Warning HotplugStuck"}, kubevirt.PhaseMountedToPod, false, 1, nil},
		{"growth lost a race with NodeExpandVolume", summaryInput{Intents: []volumeIntent{it}, Observed: []ObservedVolume{healthyFS},
			Applied: []applied{{Op: op{Kind: outcome.Grow, Name: "hp", Intent: &it, Observed: &healthyFS}, Result: outcome.Error,
				Err: fmt.Errorf("%w: EBUSY", ErrBusy)}}},
			StateMounted, nil, kubevirt.PhaseMountedToPod, false, 1, nil},
		{"growth keeps waiting", summaryInput{Intents: []volumeIntent{it}, Observed: []ObservedVolume{healthyFS}, Busy: map[string]int{"hp": busyWarnAfter - 1},
			Applied: []applied{{Op: op{Kind: outcome.Grow, Name: "hp", Intent: &it, Observed: &healthyFS}, Result: outcome.Error,
				Err: fmt.Errorf("%w: whether the attachment pod still publishes it is unknown: EIO", ErrBusy)}}},
			StateMounted, []string{"Warning FilesystemExpansionFailed"}, kubevirt.PhaseMountedToPod, false, 1, nil},
		{"claim went down below the device", summaryInput{Intents: []volumeIntent{it}, Observed: []ObservedVolume{healthyFS}, LastCapacity: map[string]int64{"hp": 30 << 30},
			Applied: []applied{{Op: op{Kind: outcome.Grow, Name: "hp", Intent: &it, Observed: &healthyFS}, Result: outcome.Unchanged,
				Grow: GrowResult{DeviceBytes: 20 << 30, SlackBytes: 16 << 20}}}},
			StateMounted, []string{"Warning ShrinkIgnored"}, kubevirt.PhaseMountedToPod, false, 0, []string{ExpansionShrinkIgnored}},
		{"stopping mid-growth reports nothing", summaryInput{Intents: []volumeIntent{it}, Observed: []ObservedVolume{healthyFS},
			Applied: []applied{{Op: op{Kind: outcome.Grow, Name: "hp", Intent: &it, Observed: &healthyFS}, Result: outcome.Error, Err: errors.New("canceled"), Canceled: true}}},
			StateMounted, nil, kubevirt.PhaseMountedToPod, false, 0, nil},
		{"detach of a volume that left the spec", summaryInput{Intents: []volumeIntent{it}, Observed: []ObservedVolume{healthyFS}, Applied: []applied{detachGone}},
			StateMounted, []string{"Normal VolumeUnmounted"}, kubevirt.PhaseMountedToPod, false, 0, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.in.VMI, tt.in.ReportVolumeStatus = vmi, true
			s := summarize(tt.in)
			if got := stateOf(s, "hp"); got != tt.state {
				t.Errorf("state = %q, want %q", got, tt.state)
			}
			var events []string
			for _, e := range s.Events {
				events = append(events, e.Type+" "+e.Reason)
			}
			if !slices.Equal(events, tt.events) {
				t.Errorf("events = %v, want %v", events, tt.events)
			}
			if got := s.Status["hp"].Phase; got != tt.status {
				t.Errorf("status phase = %q, want %q", got, tt.status)
			}
			// A pass comes back when a storage probe's deadline has passed.
			if want := tt.in.Observed; len(want) > 0 && s.RequeueIn != want[0].Answering {
				t.Errorf("requeue in %s, want %s", s.RequeueIn, want[0].Answering)
			}
			if s.Requeue != tt.requeue || len(s.Errs) != tt.errs {
				t.Errorf("requeue %v errs %v, want %v and %d errors", s.Requeue, s.Errs, tt.requeue, tt.errs)
			}
			if !slices.Equal(s.Expansions, tt.expanded) {
				t.Errorf("expansions = %v, want %v", s.Expansions, tt.expanded)
			}
		})
	}
}

func stateOf(s summary, name string) string {
	for _, v := range s.Volumes {
		if v.Name == name {
			return v.State
		}
	}
	return ""
}

// TestSummarizeGoneLauncher reports what a cleanup did without per-volume
// state or status: the launcher's VMI may be gone.
func TestSummarizeGoneLauncher(t *testing.T) {
	o := healthyObserved("a", kubevirt.Filesystem)
	s := summarize(summaryInput{Observed: []ObservedVolume{o},
		Applied: []applied{{Op: op{Kind: outcome.Detach, Name: "a", Observed: &o}, Result: outcome.Removed}}})
	if len(s.Volumes) != 0 || len(s.Status) != 0 || len(s.Ops) != 1 || len(s.Events) != 1 || !strings.Contains(s.Events[0].Message, "unmounted") {
		t.Fatalf("summary = %+v", s)
	}
}

// TestSummarizeEngineRefusalNamesVolume keeps the volume in a refusal the
// engine made, as in one the rules made.
func TestSummarizeEngineRefusalNamesVolume(t *testing.T) {
	vmi := kt.Decode(kt.VMIObject(kt.Vol{Name: "hp", Claim: "c1", AttachUID: kt.AttachUID}))
	it := volumeIntent{HotplugVolume: kubevirt.HotplugVolume{Name: "hp"}, Desired: DesiredVolume{Name: "hp"}, Attachable: true}
	r := applied{Op: op{Kind: outcome.Attach, Name: "hp", Intent: &it}, Result: outcome.Refused,
		Refusal: &kubevirt.Refusal{Reason: kubevirt.RefusedUnsafeContent, Message: "disk.img is a symlink"}}
	s := summarize(summaryInput{VMI: vmi, Intents: []volumeIntent{it}, Applied: []applied{r}})
	if len(s.Events) != 1 || s.Events[0].Refusal == nil || s.Events[0].Refusal.Reason != kubevirt.RefusedUnsafeContent ||
		!strings.HasPrefix(s.Events[0].Message, `unsafe-content: volume "hp": `) {
		t.Fatalf("events = %+v", s.Events)
	}
}

// TestSummarizeAttachPhases times one volume's attach over its passes,
// from the world's times alone: the arrival of each pass's VMI change,
// the end of its engine calls and the attachment pod's timestamps.
func TestSummarizeAttachPhases(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	pod := func(uid string, created, ready float64) *corev1.Pod {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid), CreationTimestamp: metav1.NewTime(at(created))}}
		if ready >= 0 {
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(at(ready))}}
		}
		return p
	}
	podA, podB, unready := pod("a", 1, 2), pod("b", 4, 5), pod("a", 1, -1)
	type pass struct {
		arrived  float64
		pod      *corev1.Pod
		result   outcome.Result // the attach's, "" for none
		took     time.Duration
		state    string
		finished float64
		ready    bool // volumeStatus phase Ready
		want     string
	}
	tests := []struct {
		name   string
		target bool
		passes []pass
	}{
		{"every phase", false, []pass{
			{0, podA, outcome.NotPublished, time.Millisecond, StateFailed, 2.5, false, ""},
			{3, podA, outcome.Mounted, 200 * time.Millisecond, StateMounted, 4, false, "total 4s: pod-created 1s, pod-ready 1s, publish-seen 1.8s, mounted 200ms"},
			{4.5, podA, "", 0, StateMounted, 5, false, ""},
			{6, podA, "", 0, StateMounted, 6.1, true, "launcher-ready 2s"},
			{7, podA, "", 0, StateMounted, 7.1, true, ""},
		}},
		{"attachment pod replaced before the mount", false, []pass{
			{0, podA, outcome.Error, 100 * time.Millisecond, StateFailed, 3, false, ""},
			{5.5, podB, outcome.Mounted, 100 * time.Millisecond, StateMounted, 6, false, "total 6s: pod-created 4s, pod-ready 1s, publish-seen 900ms, mounted 100ms"},
		}},
		{"replaced pod, mounted without a new attach", false, []pass{
			{0, podA, outcome.Error, 100 * time.Millisecond, StateFailed, 3, false, ""},
			{5.5, podB, "", 0, StateMounted, 6, false, "total 6s: pod-created 4s, pod-ready 1s"},
		}},
		{"no Ready time", false, []pass{
			{0, unready, outcome.Mounted, 100 * time.Millisecond, StateMounted, 3, false, "total 3s: pod-created 1s, mounted 100ms"},
		}},
		{"clocks disagree", false, []pass{
			// The API server's clock is behind: the pod is created "before"
			// the change arrived, and the launcher's Ready "before" the mount.
			{1.5, podA, outcome.Mounted, 100 * time.Millisecond, StateMounted, 3, false, "total 1.5s: pod-ready 1s, publish-seen 900ms, mounted 100ms"},
			{2, podA, "", 0, StateMounted, 3.5, true, ""},
		}},
		{"agent clock stepped back", false, []pass{
			{10, podA, outcome.Mounted, 100 * time.Millisecond, StateMounted, 9, false, "total -1s: pod-ready 1s, publish-seen 6.9s, mounted 100ms"},
		}},
		{"refused while waiting", false, []pass{
			{0, podA, outcome.NotPublished, time.Millisecond, StateFailed, 1, false, ""},
			{2, podA, outcome.Refused, time.Millisecond, StateRefused, 3, false, ""},
		}},
		{"migration target: volumeStatus is the source's", true, []pass{
			{0, podA, outcome.Mounted, 100 * time.Millisecond, StateMounted, 3, false, "total 3s: pod-created 1s, pod-ready 1s, publish-seen 900ms, mounted 100ms"},
			{4, podA, "", 0, StateMounted, 5, true, ""},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st := newVMIState()
			for i, p := range tc.passes {
				status := &kubevirt.VolumeStatus{Name: "hp", Phase: kubevirt.PhaseMountedToPod}
				if p.ready {
					status.Phase = kubevirt.PhaseReady
				}
				it := volumeIntent{HotplugVolume: kubevirt.HotplugVolume{Name: "hp", Mode: kubevirt.Filesystem, Status: status, AttachPodUID: p.pod.UID, AttachPod: p.pod},
					Desired: DesiredVolume{Name: "hp", Mode: kubevirt.Filesystem}}
				d := decision{Intents: []volumeIntent{it}, Arrived: at(p.arrived), Target: tc.target}
				var observed []ObservedVolume
				var done []applied
				if p.result == "" && p.state == StateMounted {
					observed = []ObservedVolume{healthyObserved("hp", kubevirt.Filesystem)}
				}
				if p.result != "" {
					done = []applied{{Op: op{Kind: outcome.Attach, Name: "hp", Intent: &it}, Result: p.result, Took: p.took}}
				}
				s := summary{Volumes: []volumeState{{Name: "hp", Mode: "Filesystem", State: p.state}}}
				if p.result == outcome.Mounted {
					s.normal("hp", EventVolumeMounted, "Volume hp has been mounted in virt-launcher pod (mounted)")
				}
				noteWanted(st, d.Intents, observed, d.Arrived)
				got := timeAttaches(st, d, &s, done, at(p.finished))
				if text := timingsText(got); text != p.want {
					t.Errorf("pass %d: timed %q, want %q", i, text, p.want)
				}
				for _, g := range got {
					for _, ph := range g.Phases {
						if ph.Took < 0 {
							t.Errorf("pass %d: negative phase %v", i, g.Phases)
						}
					}
				}
				if p.result == outcome.Mounted && strings.HasPrefix(p.want, "total") && !strings.HasPrefix(p.want, "total -") {
					if msg := s.Events[0].Message; !strings.Contains(msg, attachPhasesMarker) {
						t.Errorf("pass %d: VolumeMounted Event %q names no phases", i, msg)
					}
				}
			}
			if tc.name == "refused while waiting" && (len(st.wanted) != 0 || len(st.attach) != 0) {
				t.Errorf("a refused volume is still measured: %v %v", st.wanted, st.attach)
			}
		})
	}
}

// timingsText is "total 4s: pod-created 1s, ..." or "launcher-ready 2s".
func timingsText(ts []attachTiming) string {
	var out []string
	for _, t := range ts {
		var phases []string
		for _, p := range t.Phases {
			phases = append(phases, p.Phase+" "+p.Took.String())
		}
		s := strings.Join(phases, ", ")
		if t.Total >= 0 || len(t.Phases) > 0 && t.Phases[0].Phase != AttachPhaseLauncherReady {
			s = "total " + t.Total.String() + ": " + s
		}
		out = append(out, s)
	}
	return strings.Join(out, "; ")
}

// TestAttachPhasesText pins the phases' text in the VolumeMounted Event:
// hpmount diag reads it back (diag.TestLastAttach, docs/diag.md).
func TestAttachPhasesText(t *testing.T) {
	ms := time.Millisecond
	got := phasesText(attachTiming{Total: 3322 * ms, Phases: []phaseTime{
		{AttachPhasePodCreated, time.Second}, {AttachPhasePodReady, 2 * time.Second}, {AttachPhasePublishSeen, 310 * ms}, {AttachPhaseMounted, 12*ms + 300*time.Microsecond},
	}})
	if want := "attach phases: pod-created 1s, pod-ready 2s, publish-seen 310ms, mounted 12ms (total 3.322s)"; got != want {
		t.Errorf("phases text %q, want %q", got, want)
	}
	if got := phasesText(attachTiming{Total: 2 * time.Second}); got != "attach phases: none known (total 2s)" {
		t.Errorf("no phase known: %q", got)
	}
}
