// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hpmount/hpmount/kubevirt"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/client-go/util/workqueue"
)

// statusWriter carries volumeStatus updates to the API off the reconcile
// path: a slow or rate-limited API server delays the status, never the
// mounts of other VMIs. The newest update of a volume wins.
type statusWriter struct {
	mu      sync.Mutex
	pending map[string]map[string]statusUpdate // VMI key → volume → update
	queue   workqueue.TypedRateLimitingInterface[string]
}

func newStatusWriter(m workqueue.MetricsProvider) *statusWriter {
	return &statusWriter{
		pending: map[string]map[string]statusUpdate{},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "hpmount-status", MetricsProvider: m}),
	}
}

// add merges updates for key; older pending updates of the same volumes
// are replaced.
func (w *statusWriter) add(key string, updates map[string]statusUpdate) {
	w.merge(key, updates, true)
	w.queue.Add(key)
}

// merge adds updates to what is pending for key; replace says whether an
// update replaces a pending one of the same volume.
func (w *statusWriter) merge(key string, updates map[string]statusUpdate, replace bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.pending[key]
	if p == nil {
		p = map[string]statusUpdate{}
		w.pending[key] = p
	}
	for name, u := range updates {
		if _, pending := p[name]; replace || !pending {
			p[name] = u
		}
	}
}

// take removes and returns what is pending for key.
func (w *statusWriter) take(key string) map[string]statusUpdate {
	w.mu.Lock()
	defer w.mu.Unlock()
	p := w.pending[key]
	delete(w.pending, key)
	return p
}

// giveBack returns updates that failed to be written, unless a newer one of
// the same volume arrived meanwhile.
func (w *statusWriter) giveBack(key string, updates map[string]statusUpdate) {
	w.merge(key, updates, false)
}

// statusWorker writes queued updates until the queue shuts down.
func (a *Agent) statusWorker(ctx context.Context) {
	for {
		key, quit := a.status.queue.Get()
		if quit {
			return
		}
		if err := a.writeStatus(ctx, key); err != nil && ctx.Err() == nil {
			a.log.Warn("cannot report volume status, retrying", "vmi", key, "error", err.Error())
			a.status.queue.AddRateLimited(key)
		} else {
			a.status.queue.Forget(key)
		}
		a.status.queue.Done(key)
	}
}

// writeStatus patches what is pending for key onto the VMI, starting from
// the cached object. A VMI gone from the cache needs no status.
func (a *Agent) writeStatus(ctx context.Context, key string) error {
	updates := a.status.take(key)
	if len(updates) == 0 {
		return nil
	}
	r, exists, err := a.cachedVMI(key)
	if err != nil || !exists {
		return err
	}
	list, err := r.volumeStatusList()
	if err == nil {
		err = a.patchVolumeStatus(ctx, r.Namespace, r.Name, list, updates)
	}
	if err != nil {
		a.status.giveBack(key, updates)
		return err
	}
	return nil
}

// apiTimeout bounds one API call the agent makes itself.
const apiTimeout = 10 * time.Second

type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// volumeStatusPatch builds a JSON patch for the VMI object from list, its
// status.volumeStatus as read: a test op that status.volumeStatus is still
// exactly list, then one replace per changed entry. It returns nil when
// nothing changes, or when the VMI has no status.volumeStatus (list is
// nil). Unknown fields of the entries are kept.
func volumeStatusPatch(list []any, updates map[string]statusUpdate) ([]byte, error) {
	if list == nil {
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

// patchVolumeStatus writes the updates to the VMI ns/name (the VMI CRD has
// no status subresource). The first try uses list, the cached
// status.volumeStatus; a conflict or a failed test op re-reads the VMI and
// tries again.
func (a *Agent) patchVolumeStatus(ctx context.Context, ns, name string, list []any, updates map[string]statusUpdate) error {
	client := a.dyn.Resource(kubevirt.VMIResource).Namespace(ns)
	current, fresh := list, false
	backoff := wait.Backoff{Steps: 5, Duration: 50 * time.Millisecond, Factor: 2, Jitter: 0.1}
	retriable := func(err error) bool { return apierrors.IsConflict(err) || apierrors.IsInvalid(err) }
	return retry.OnError(backoff, retriable, func() error {
		if fresh {
			ctx, cancel := context.WithTimeout(ctx, apiTimeout)
			defer cancel()
			u, err := client.Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return fmt.Errorf("get vmi %s/%s: %w", ns, name, err)
			}
			if current, _, err = unstructured.NestedSlice(u.Object, "status", "volumeStatus"); err != nil {
				return fmt.Errorf("read status.volumeStatus of vmi %q: %w", ns+"/"+name, err)
			}
		}
		fresh = true
		patch, err := volumeStatusPatch(current, updates)
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
