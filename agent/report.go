package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/outcome"
)

// apiTimeout bounds one API call the agent makes itself.
const apiTimeout = 10 * time.Second

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

// report carries a summary out: metrics, logs, Events (ref nil sends
// none) and the growth capacities to remember. The volumeStatus updates go
// to the status writer's queue (see reconcileLauncher).
func (a *Agent) report(st *vmiState, ref *corev1.ObjectReference, log *slog.Logger, s summary) {
	for _, o := range s.Ops {
		a.obs.OpAttempt(string(o.Op), string(o.Result), o.Took)
		a.logOp(log, o)
	}
	for _, k := range s.Cleared {
		delete(st.warned, k)
	}
	for _, e := range s.Events {
		a.emit(st, ref, log, e)
	}
	for _, r := range s.Expansions {
		a.obs.Expansion(r)
	}
	if ref != nil {
		for name, r := range s.Sizes {
			a.obs.VolumeSizes(ref.Namespace, ref.Name, name, r)
		}
		for _, v := range s.Volumes {
			a.obs.VolumeState(ref.Namespace, ref.Name, v.Name, v.Mode, v.State)
			if v.State != StateUnmounted {
				a.obs.VolumeStaleOpen(ref.Namespace, ref.Name, v.Name, v.StaleOpen)
			}
			a.reportLatency(st, v)
		}
	}
	for name, c := range s.Capacity {
		st.capacity[name] = c
	}
}

// reportLatency observes the attach latency of a volume that just became
// usable, and forgets it for a volume that was refused or removed.
func (a *Agent) reportLatency(st *vmiState, v volumeState) {
	since, ok := st.wanted[v.Name]
	if !ok {
		return
	}
	switch v.State {
	case StateMounted:
		a.obs.AttachLatency(v.Mode, time.Since(since))
		delete(st.wanted, v.Name)
	case StateRefused, StateUnmounted:
		delete(st.wanted, v.Name)
	}
}

func (a *Agent) logOp(log *slog.Logger, o opReport) {
	vlog := log.With("volume", o.Name, "op", string(o.Op))
	switch {
	case o.Result == outcome.Error:
		vlog.Error(string(o.Op)+" failed", "error", o.Err.Error())
	case o.Result == outcome.NotPublished:
		vlog.Debug("volume not published by the attachment pod", "error", o.Err.Error())
	case o.Result.Changed():
		vlog.Info("volume changed", "result", string(o.Result))
	}
}

// emit sends one Event. A Once Warning is skipped while its last message
// for the volume and reason is the same; a refusal is logged and counted
// only when its Event is sent.
func (a *Agent) emit(st *vmiState, ref *corev1.ObjectReference, log *slog.Logger, e event) {
	if e.Once {
		if st.warned[e.key()] == e.Message {
			return
		}
		st.warned[e.key()] = e.Message
	}
	if e.Refusal != nil {
		log.Warn("hotplug refused", "volume", e.Volume, "reason", e.Refusal.Reason, "message", e.Refusal.Message)
		a.obs.Refusal(e.Refusal.Reason)
	}
	if ref != nil {
		a.recorder.Event(ref, e.Type, e.Reason, e.Message)
	}
}

type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// volumeStatusPatch builds a JSON patch for the VMI object: a test op that
// status.volumeStatus is still exactly what was read, then one replace per
// changed entry. It returns nil when nothing changes. Unknown fields of the
// entries are kept.
func volumeStatusPatch(u *unstructured.Unstructured, updates map[string]statusUpdate) ([]byte, error) {
	list, found, err := unstructured.NestedSlice(u.Object, "status", "volumeStatus")
	if err != nil {
		return nil, fmt.Errorf("read status.volumeStatus of vmi %q: %w", u.GetNamespace()+"/"+u.GetName(), err)
	}
	if !found {
		return nil, nil
	}
	ops := []jsonPatchOp{{Op: "test", Path: "/status/volumeStatus", Value: list}}
	for i, raw := range list {
		entry, ok := raw.(map[string]any)
		if !ok {
			continue
		}
		name, _ := entry["name"].(string)
		up, ok := updates[name]
		if !ok {
			continue
		}
		phase, _ := entry["phase"].(string)
		if phase == up.Phase || (up.Phase == kubevirt.PhaseMountedToPod && phase == kubevirt.PhaseReady) {
			continue
		}
		changed := make(map[string]any, len(entry)+3)
		for k, v := range entry {
			changed[k] = v
		}
		changed["phase"], changed["reason"], changed["message"] = up.Phase, up.Reason, up.Message
		ops = append(ops, jsonPatchOp{Op: "replace", Path: fmt.Sprintf("/status/volumeStatus/%d", i), Value: changed})
	}
	if len(ops) == 1 {
		return nil, nil
	}
	return json.Marshal(ops)
}

// patchVolumeStatus writes the updates to the VMI object (the VMI CRD has no
// status subresource). The first try uses the cached object; a conflict or
// a failed test op re-reads the VMI and tries again.
func (a *Agent) patchVolumeStatus(ctx context.Context, cached *unstructured.Unstructured, updates map[string]statusUpdate) error {
	ns, name := cached.GetNamespace(), cached.GetName()
	client := a.dyn.Resource(kubevirt.VMIResource).Namespace(ns)
	current := cached
	backoff := wait.Backoff{Steps: 5, Duration: 50 * time.Millisecond, Factor: 2, Jitter: 0.1}
	retriable := func(err error) bool { return apierrors.IsConflict(err) || apierrors.IsInvalid(err) }
	return retry.OnError(backoff, retriable, func() error {
		if current == nil {
			ctx, cancel := context.WithTimeout(ctx, apiTimeout)
			defer cancel()
			fresh, err := client.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("get vmi %s/%s: %w", ns, name, err)
			}
			current = fresh
		}
		patch, err := volumeStatusPatch(current, updates)
		current = nil
		if err != nil || patch == nil {
			return err
		}
		ctx, cancel := context.WithTimeout(ctx, apiTimeout)
		defer cancel()
		if _, err := client.Patch(ctx, name, types.JSONPatchType, patch, metav1.PatchOptions{}); err != nil {
			return err
		}
		return nil
	})
}
