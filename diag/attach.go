// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/hpmount/hpmount/kubevirt"
)

// LastAttach is the last attach of a volume that the agent timed, read
// back from the Events on its VMI: the phases up to mounted from the
// agent's VolumeMounted Event (its hpmount_attach_phase_seconds figures),
// launcher-ready from virt-handler's VolumeReady Event after it.
type LastAttach struct {
	// Mounted is when the agent's VolumeMounted Event was last sent.
	Mounted time.Time     `json:"mounted"`
	Phases  []AttachPhase `json:"phases"`
	// TotalSeconds is the agent's hpmount_attach_latency_seconds figure.
	TotalSeconds float64 `json:"totalSeconds"`
}

// AttachPhase is one phase of an attach. Approximate: taken from two
// Events' times, which count whole seconds (launcher-ready).
type AttachPhase struct {
	Phase       string  `json:"phase"`
	Seconds     float64 `json:"seconds"`
	Approximate bool    `json:"approximate,omitempty"`
}

// The Events an attach's phases are read from: the agent's (agent
// EventVolumeMounted, whose message ends with its phases) and
// virt-handler's when it reports the disk in the domain (its
// VolumeReadyReason and message, pkg/virt-handler).
const (
	reasonVolumeMounted = "VolumeMounted"
	reasonVolumeReady   = "VolumeReady"
	phaseLauncherReady  = "launcher-ready"
)

var (
	mountedMessage = regexp.MustCompile(`Volume (\S+) has been mounted in virt-launcher pod .*; attach phases: (.*) \(total ([^)]+)\)$`)
	readyMessage   = regexp.MustCompile(`Successfully attach hotplugged volume (\S+) to VM`)
)

// attachKey names a volume of a VMI by the VMI's UID, as Events do.
type attachKey struct {
	vmi    types.UID
	volume string
}

// attachEvents is the newest VolumeMounted and VolumeReady Event time of
// each volume, and the attach its VolumeMounted Event names.
type attachEvents struct {
	mounted map[attachKey]*LastAttach
	ready   map[attachKey]time.Time
}

// listAttaches reads the Events of the two reasons on the VMIs of ns:
// one field-selected list each, never a list per VMI.
func listAttaches(ctx context.Context, kube kubernetes.Interface, ns string) (*attachEvents, error) {
	ae := &attachEvents{mounted: map[attachKey]*LastAttach{}, ready: map[attachKey]time.Time{}}
	for _, reason := range []string{reasonVolumeMounted, reasonVolumeReady} {
		sel := fields.Set{"involvedObject.kind": kubevirt.VMIKind, "reason": reason}.AsSelector().String()
		list, err := kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
		if err != nil {
			return nil, fmt.Errorf("list %s Events: %w", reason, err)
		}
		for i := range list.Items {
			ae.add(&list.Items[i])
		}
	}
	return ae, nil
}

// add takes one Event in, keeping the newest of each kind per volume.
func (ae *attachEvents) add(ev *corev1.Event) {
	at := eventTime(ev)
	switch ev.Reason {
	case reasonVolumeMounted:
		m := mountedMessage.FindStringSubmatch(ev.Message)
		if m == nil {
			return // a mount that ended no timed attach
		}
		k := attachKey{ev.InvolvedObject.UID, m[1]}
		if old := ae.mounted[k]; old != nil && !at.After(old.Mounted) {
			return
		}
		ae.mounted[k] = parseAttach(at, m[2], m[3])
	case reasonVolumeReady:
		m := readyMessage.FindStringSubmatch(ev.Message)
		if m == nil {
			return
		}
		k := attachKey{ev.InvolvedObject.UID, m[1]}
		if at.After(ae.ready[k]) {
			ae.ready[k] = at
		}
	}
}

// parseAttach reads "pod-created 1s, mounted 12ms" and the total; a
// phase that does not parse is left out.
func parseAttach(at time.Time, phases, total string) *LastAttach {
	la := &LastAttach{Mounted: at, Phases: []AttachPhase{}}
	if d, err := time.ParseDuration(total); err == nil {
		la.TotalSeconds = d.Seconds()
	}
	for _, p := range strings.Split(phases, ", ") {
		name, dur, ok := strings.Cut(p, " ")
		d, err := time.ParseDuration(dur)
		if ok && err == nil {
			la.Phases = append(la.Phases, AttachPhase{Phase: name, Seconds: d.Seconds()})
		}
	}
	return la
}

// of returns the last attach of volume of the VMI, nil when no Event names
// one: the agent timed none (adopted after a restart), or its Events
// expired (the API server keeps them an hour by default).
func (ae *attachEvents) of(vmi types.UID, volume string) *LastAttach {
	if ae == nil {
		return nil
	}
	k := attachKey{vmi, volume}
	la := ae.mounted[k]
	if la == nil {
		return nil
	}
	out := *la
	out.Phases = append([]AttachPhase(nil), la.Phases...)
	// Both times count whole seconds: a Ready in the same second as the
	// mount is 0s, and one before it belongs to an earlier attach.
	if ready, ok := ae.ready[k]; ok && !ready.Before(la.Mounted.Truncate(time.Second)) {
		out.Phases = append(out.Phases, AttachPhase{Phase: phaseLauncherReady, Approximate: true,
			Seconds: ready.Sub(la.Mounted.Truncate(time.Second)).Seconds()})
	}
	return &out
}

// eventTime is when an Event was last seen: its series or lastTimestamp,
// else its eventTime or firstTimestamp.
func eventTime(ev *corev1.Event) time.Time {
	switch {
	case ev.Series != nil && !ev.Series.LastObservedTime.IsZero():
		return ev.Series.LastObservedTime.Time
	case !ev.LastTimestamp.IsZero():
		return ev.LastTimestamp.Time
	case !ev.EventTime.IsZero():
		return ev.EventTime.Time
	}
	return ev.FirstTimestamp.Time
}

// String is the wide table's LAST-ATTACH cell: "pod-created 1s, ...,
// launcher-ready ~2s".
func (la *LastAttach) String() string {
	if la == nil {
		return ""
	}
	parts := make([]string, 0, len(la.Phases))
	for _, p := range la.Phases {
		d := time.Duration(p.Seconds * float64(time.Second)).Round(time.Millisecond).String()
		if p.Approximate {
			d = "~" + d
		}
		parts = append(parts, p.Phase+" "+d)
	}
	return strings.Join(parts, ", ")
}
