package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"

	"github.com/hpmount/hpmount/mount"
)

func vmiRef(ns, name string, uid types.UID, rv string) *corev1.ObjectReference {
	return &corev1.ObjectReference{
		APIVersion:      VMIAPIVersion,
		Kind:            VMIKind,
		Namespace:       ns,
		Name:            name,
		UID:             uid,
		ResourceVersion: rv,
	}
}

// warnOnce emits a Warning Event unless the same message was the last one
// for this volume and reason: a resync must not repeat it every minute.
func (a *Agent) warnOnce(st *vmiState, ref *corev1.ObjectReference, volume, reason, msg string) {
	k := volume + "/" + reason
	if st.warned[k] == msg {
		return
	}
	st.warned[k] = msg
	a.recorder.Event(ref, corev1.EventTypeWarning, reason, msg)
}

// refuse reports a refusal: a Warning HotplugRefused Event, a log line and
// the refusal counter. volume is empty for a launcher refusal.
func (a *Agent) refuse(st *vmiState, ref *corev1.ObjectReference, log *slog.Logger, volume string, r *Refusal) {
	k := volume + "/" + reasonHotplugRefusedEvent
	if st.warned[k] == r.Message {
		return
	}
	log.Warn("hotplug refused", "reason", r.Reason, "message", r.Message)
	a.obs.Refusal(r.Reason)
	a.warnOnce(st, ref, volume, reasonHotplugRefusedEvent, r.Message)
}

// applyGrow runs a growth check and reports it. A failure is reported but
// not retried before the next resync or capacity change: retrying a missing
// capability in a loop helps nobody.
func (a *Agent) applyGrow(ctx context.Context, snap Snapshot, st *vmiState, vmi *VMI, ref *corev1.ObjectReference, log *slog.Logger, it *volumeIntent) {
	v := it.Desired
	t := time.Now()
	r, err := a.engine.Grow(ctx, snap, v)
	d := time.Since(t)
	if ctx.Err() != nil {
		return
	}
	prev, seen := st.capacity[v.Name]
	st.capacity[v.Name] = v.CapacityBytes
	if err != nil {
		a.obs.OpAttempt(string(opGrow), "error", d)
		a.obs.Expansion(ExpansionFailed)
		log.Error("growth check failed", "error", err.Error())
		a.warnOnce(st, ref, v.Name, "FilesystemExpansionFailed", fmt.Sprintf("Volume %s could not be expanded: %v", v.Name, err))
		return
	}
	delete(st.warned, v.Name+"/FilesystemExpansionFailed")
	a.obs.VolumeSizes(vmi.Namespace, vmi.Name, v.Name, r)
	// A shrink request is a claim that went down and is now below the
	// current size by more than the slack by which backends round devices
	// up. A device that grew before the claim's new size reached the VMI
	// status is not one.
	current := r.DeviceBytes
	if seen && v.CapacityBytes < prev && v.CapacityBytes > 0 && current > 0 && v.CapacityBytes < current-mount.GrowSlackBytes {
		a.obs.OpAttempt(string(opGrow), string(Unchanged), d)
		a.obs.Expansion(ExpansionShrinkIgnored)
		a.warnOnce(st, ref, v.Name, "ShrinkIgnored", fmt.Sprintf("Volume %s: claim capacity %s is below the current size %s; volumes are never shrunk",
			v.Name, size(v.CapacityBytes), size(current)))
		return
	}
	if !r.Grown && !r.ImageGrown {
		a.obs.OpAttempt(string(opGrow), string(Unchanged), d)
		a.obs.Expansion(ExpansionUnchanged)
		return
	}
	a.obs.OpAttempt(string(opGrow), "grown", d)
	a.obs.Expansion(ExpansionGrown)
	log.Info("filesystem expanded", "fstype", r.FilesystemType,
		"filesystemBefore", r.FilesystemBefore, "filesystemAfter", r.FilesystemAfter,
		"diskImageBefore", r.DiskImageBefore, "diskImageAfter", r.DiskImageAfter)
	msg := fmt.Sprintf("Volume %s: filesystem %s grew from %s to %s", v.Name, r.FilesystemType, size(r.FilesystemBefore), size(r.FilesystemAfter))
	if r.ImageGrown {
		msg += fmt.Sprintf(", disk image from %s to %s", size(r.DiskImageBefore), size(r.DiskImageAfter))
	}
	a.recorder.Event(ref, corev1.EventTypeNormal, "FilesystemExpanded", msg)
}

func size(b int64) string {
	return resource.NewQuantity(b, resource.BinarySI).String()
}

// statusUpdate is the new phase, reason and message of one volumeStatus
// entry.
type statusUpdate struct {
	Phase, Reason, Message string
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
		if phase == up.Phase || (up.Phase == PhaseMountedToPod && phase == PhaseReady) {
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
	client := a.dyn.Resource(VMIResource).Namespace(ns)
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
