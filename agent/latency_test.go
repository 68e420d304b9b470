// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/kubevirt"
)

type latencies struct {
	NopObserver
	mu     sync.Mutex
	got    []time.Duration
	phases []string
}

func (l *latencies) AttachPhase(phase string, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if d < 0 {
		phase += " negative"
	}
	l.phases = append(l.phases, phase)
}

func (l *latencies) AttachLatency(_ string, d time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.got = append(l.got, d)
}

// TestAttachLatency measures from the arrival of the VMI change that made
// the volume desired, across the passes that wait for its publish, to the
// pass that makes it usable, and each phase of it up to the launcher's
// Ready; an adopted volume has none.
func TestAttachLatency(t *testing.T) {
	obs := &latencies{}
	ta := standardAgent(t, func(c *Config) { c.Observer, c.GrowFilesystems = obs, false })
	ctx := context.Background()
	u := vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: attachUID})
	ta.setVMI(t, u)
	now := time.Now()
	ta.addPods(t, attachmentPod(func(p *corev1.Pod) {
		p.CreationTimestamp = metav1.NewTime(now.Add(-2 * time.Second))
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(now.Add(-time.Second))}}
	}))
	ta.noteArrival(testKey, now.Add(-3*time.Second))
	ta.engine.attachErr["hp"] = fmt.Errorf("publish dir: %w", kubelet.ErrNotPublished)
	if err := ta.reconcile(ctx, testKey); err == nil {
		t.Fatal("a volume not yet published reconciled without error")
	}
	if len(obs.got) != 0 {
		t.Fatalf("latency observed before the volume was usable: %v", obs.got)
	}
	delete(ta.engine.attachErr, "hp")
	if err := ta.reconcile(ctx, testKey); err != nil {
		t.Fatal(err)
	}
	if len(obs.got) != 1 || obs.got[0] < 3*time.Second {
		t.Fatalf("latencies = %v, want one of at least 3s", obs.got)
	}
	if err := ta.reconcile(ctx, testKey); err != nil || len(obs.got) != 1 {
		t.Fatalf("a usable volume was measured again: %v, %v", obs.got, err)
	}
	want := []string{AttachPhasePodCreated, AttachPhasePodReady, AttachPhasePublishSeen, AttachPhaseMounted}
	if !slices.Equal(obs.phases, want) {
		t.Fatalf("phases = %v, want %v", obs.phases, want)
	}
	ta.setVMI(t, vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: attachUID, Phase: kubevirt.PhaseReady}))
	ta.noteArrival(testKey, time.Now())
	if err := ta.reconcile(ctx, testKey); err != nil {
		t.Fatal(err)
	}
	if want = append(want, AttachPhaseLauncherReady); !slices.Equal(obs.phases, want) {
		t.Fatalf("phases after the launcher's Ready = %v, want %v", obs.phases, want)
	}
	if err := ta.reconcile(ctx, testKey); err != nil || len(obs.phases) != len(want) {
		t.Fatalf("a ready volume was measured again: %v, %v", obs.phases, err)
	}

	adopted := &latencies{}
	tb := standardAgent(t, func(c *Config) { c.Observer, c.GrowFilesystems = adopted, false })
	tb.engine.setObserved(launcherUID, healthyObserved("hp", kubevirt.Filesystem))
	tb.setVMI(t, u)
	if err := tb.reconcile(ctx, testKey); err != nil || len(adopted.got) != 0 || len(adopted.phases) != 0 {
		t.Fatalf("adopted volume measured: %v %v, %v", adopted.got, adopted.phases, err)
	}
}

// TestTrimKeepsAttachTimes: the pod cache keeps what the attach phases
// are timed by, an attachment pod's creationTimestamp and Ready
// condition, and no other condition of any pod.
func TestTrimKeepsAttachTimes(t *testing.T) {
	created, ready := metav1.NewTime(time.Now().Add(-2*time.Second)), metav1.NewTime(time.Now().Add(-time.Second))
	conds := []corev1.PodCondition{
		{Type: corev1.PodScheduled, Status: corev1.ConditionTrue, LastTransitionTime: created, Message: "scheduled"},
		{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: ready, Message: "ready"},
	}
	out, err := TrimPod(attachmentPod(func(p *corev1.Pod) { p.CreationTimestamp, p.Status.Conditions = created, conds }))
	if err != nil {
		t.Fatal(err)
	}
	p := out.(*corev1.Pod)
	if !created.Equal(&p.CreationTimestamp) || !readyAt(p).Equal(ready.Time) || len(p.Status.Conditions) != 1 || p.Status.Conditions[0].Message != "" {
		t.Fatalf("trimmed attachment pod: created %v, conditions %+v; want %v and only Ready at %v", p.CreationTimestamp, p.Status.Conditions, created, ready)
	}
	out, err = TrimPod(launcherPod(func(p *corev1.Pod) { p.Status.Conditions = conds }))
	if err != nil {
		t.Fatal(err)
	}
	if p := out.(*corev1.Pod); len(p.Status.Conditions) != 0 {
		t.Fatalf("trimmed launcher keeps conditions %+v", p.Status.Conditions)
	}
}
