// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"
)

// TestLastAttach reads each volume's last timed attach back from the
// Events on its VMI: the agent's VolumeMounted message (in the agent's
// format, held to it by agent.TestSummarizeAttachPhases), and
// virt-handler's VolumeReady after it.
func TestLastAttach(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	ev := func(name, uid, reason, msg string, at float64) *corev1.Event {
		return &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{Namespace: "ns", Name: name},
			InvolvedObject: corev1.ObjectReference{Kind: "VirtualMachineInstance", Namespace: "ns", Name: "vm1", UID: types.UID(uid)},
			Reason:         reason, Message: msg, Type: corev1.EventTypeNormal,
			LastTimestamp: metav1.NewTime(t0.Add(time.Duration(at * float64(time.Second)))),
		}
	}
	mounted := func(vol, phases string) string {
		return "Volume " + vol + " has been mounted in virt-launcher pod (mounted); attach phases: " + phases
	}
	ready := func(vol string) string { return "Successfully attach hotplugged volume " + vol + " to VM" }
	kube := fake.NewClientset(
		// hp: an older attach, then the last one, then the launcher's Ready.
		ev("a", "u1", "VolumeMounted", mounted("hp", "pod-created 3s, mounted 5ms (total 3.005s)"), 0),
		ev("b", "u1", "VolumeReady", ready("hp"), 1),
		ev("c", "u1", "VolumeMounted", mounted("hp", "pod-created 1s, pod-ready 2s, publish-seen 310ms, mounted 12ms (total 3.322s)"), 10),
		ev("d", "u1", "VolumeReady", ready("hp"), 12),
		// blk: mounted, Ready not yet; a phase that does not parse.
		ev("e", "u1", "VolumeMounted", mounted("blk", "none known (total 2s)"), 5),
		// A mount that ended no timed attach, and another VMI's volume.
		ev("f", "u1", "VolumeMounted", "Volume old has been mounted in virt-launcher pod (replaced)", 6),
		ev("g", "u2", "VolumeMounted", mounted("hp", "mounted 1ms (total 1ms)"), 7),
	)
	ae, err := listAttaches(context.Background(), kube, "ns")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		vmi, volume, want string
		total             float64
	}{
		{"u1", "hp", "pod-created 1s, pod-ready 2s, publish-seen 310ms, mounted 12ms, launcher-ready ~2s", 3.322},
		{"u1", "blk", "", 2},
		{"u2", "hp", "mounted 1ms", 0.001},
	} {
		la := ae.of(types.UID(tc.vmi), tc.volume)
		if la == nil {
			t.Errorf("%s/%s: no last attach", tc.vmi, tc.volume)
			continue
		}
		if got := la.String(); got != tc.want || la.TotalSeconds != tc.total {
			t.Errorf("%s/%s: %q total %v, want %q total %v", tc.vmi, tc.volume, got, la.TotalSeconds, tc.want, tc.total)
		}
	}
	if la := ae.of("u1", "old"); la != nil {
		t.Errorf("a mount that ended no timed attach has one: %+v", la)
	}
	var none *attachEvents
	if none.of("u1", "hp") != nil {
		t.Error("Events that could not be listed gave an attach")
	}
}
