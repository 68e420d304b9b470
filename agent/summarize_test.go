// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"

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
