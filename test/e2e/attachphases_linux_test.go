// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/agent"
	"github.com/hpmount/hpmount/test/simnode"
)

// TestAttachPhases hotplugs a volume in KubeVirt's order, each step by
// the component that makes it (the VMI names the volume; virt-controller
// creates the attachment pod; the kubelet publishes the volume and marks
// the pod Ready; virt-controller names it in volumeStatus; after the
// mount, virt-handler sets the volume Ready), and checks that the agent
// observes every phase of hpmount_attach_phase_seconds exactly once.
func TestAttachPhases(t *testing.T) {
	e := newEnv(t)
	v := e.newVM("tenant-a", "vm1")
	data := v.addVolume("data", "ext4", 64<<20)
	v.apply()
	e.eventually("the volume pending", 30*time.Second, func() error { return e.volumeCount("Filesystem", "pending", 1) })

	// The pod's creationTimestamp counts whole seconds: created in the
	// same second as the VMI change arrived, it would read as before it
	// and pod-created would rightly not be observed.
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second)))
	pod, err := v.Ctrl.CreateAttachmentPod(e.ctx, v.Launcher, []simnode.Volume{data})
	e.must(err)
	v.publish(pod.UID, data)
	// The agent's pod and VMI caches are separate watches: virt-controller
	// names the pod only after its own cache saw it Ready, and so here the
	// VMI changes only after the agent reconciled on the pod's Ready (a
	// pass that may have been running already, and the next).
	passes := e.reconciles()
	pod.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.Now()}}
	_, err = e.kube.CoreV1().Pods(pod.Namespace).UpdateStatus(e.ctx, pod, metav1.UpdateOptions{})
	e.must(err)
	e.eventually("the agent's passes after the pod's Ready", 30*time.Second, func() error {
		if n := e.reconciles(); n < passes+2 {
			return fmt.Errorf("%v passes, want %v", n, passes+2)
		}
		return nil
	})
	v.Attach[data.Name] = pod.UID
	v.apply()
	v.waitMounted(data)
	want := map[string]int{agent.AttachPhasePodCreated: 1, agent.AttachPhasePodReady: 1, agent.AttachPhasePublishSeen: 1, agent.AttachPhaseMounted: 1, agent.AttachPhaseLauncherReady: 0}
	e.eventually("every phase up to mounted", 30*time.Second, func() error { return e.phaseCounts(want) })
	ev := e.waitEvent(v.NS, v.Name, "VolumeMounted", "data")
	t.Logf("VolumeMounted: %s", ev.Message)
	if !strings.Contains(ev.Message, "attach phases: pod-created ") {
		t.Fatalf("VolumeMounted Event names no phases: %q", ev.Message)
	}

	e.setVolumePhase(v, "data", "Ready", "VolumeReady")
	want[agent.AttachPhaseLauncherReady] = 1
	e.eventually("launcher-ready", 30*time.Second, func() error { return e.phaseCounts(want) })
}

// phaseCounts is nil once hpmount_attach_phase_seconds has want
// observations of each phase.
func (e *env) phaseCounts(want map[string]int) error {
	var errs []string
	for _, phase := range agent.AttachPhases {
		if err := e.sample(fmt.Sprintf(`hpmount_attach_phase_seconds_count{phase=%q}`, phase), want[phase]); err != nil {
			errs = append(errs, err.Error())
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "; "))
	}
	return nil
}

// setVolumePhase writes a volumeStatus phase as virt-handler does; the
// simulated virt-controller keeps it (simnode keepVolumePhases).
func (e *env) setVolumePhase(v *vm, volume, phase, reason string) {
	e.t.Helper()
	res := e.dyn.Resource(simnode.VMIResource).Namespace(v.NS)
	cur, err := res.Get(e.ctx, v.Name, metav1.GetOptions{})
	e.must(err)
	statuses, _, err := unstructured.NestedSlice(cur.Object, "status", "volumeStatus")
	e.must(err)
	for i, s := range statuses {
		if m, ok := s.(map[string]any); ok && m["name"] == volume {
			patch, err := json.Marshal([]map[string]any{
				{"op": "add", "path": fmt.Sprintf("/status/volumeStatus/%d/phase", i), "value": phase},
				{"op": "add", "path": fmt.Sprintf("/status/volumeStatus/%d/reason", i), "value": reason},
			})
			e.must(err)
			_, err = res.Patch(e.ctx, v.Name, types.JSONPatchType, patch, metav1.PatchOptions{})
			e.must(err)
			return
		}
	}
	e.t.Fatalf("vmi %s/%s has no volumeStatus of %s", v.NS, v.Name, volume)
}
