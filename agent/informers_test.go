// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hpmount/hpmount/kubevirt"
	kt "github.com/hpmount/hpmount/kubevirt/kubevirttest"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// TestTrimTransforms: what the informers cache is only what the agent
// reads; managedFields, a launcher's containers and a VMI's domain are
// dropped, and decoding and the ownership rules see no difference. A VMI's
// status.volumeStatus is kept as sent, unknown fields and large numbers
// included: the status patch tests it.
func TestTrimTransforms(t *testing.T) {
	mf := []metav1.ManagedFieldsEntry{{Manager: "virt-controller", Operation: metav1.ManagedFieldsOperationUpdate}}
	now := metav1.Now()
	pod := launcherPod(func(p *corev1.Pod) {
		p.ManagedFields = mf
		p.DeletionTimestamp = &now
		p.Spec.Containers = []corev1.Container{{Name: "compute", Image: "virt-launcher", Env: []corev1.EnvVar{{Name: "X", Value: "y"}}}}
		p.Status.ContainerStatuses = []corev1.ContainerStatus{
			{Name: "compute", ContainerID: "containerd://c0ffee", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}},
			{Name: "guest-console-log", ContainerID: "containerd://51b1", State: corev1.ContainerState{Terminated: &corev1.ContainerStateTerminated{ExitCode: 0}}},
		}
	})
	out, err := TrimPod(pod)
	if err != nil {
		t.Fatal(err)
	}
	p := out.(*corev1.Pod)
	if len(p.ManagedFields) != 0 || len(p.Spec.Containers) != 0 {
		t.Fatalf("pod kept managedFields or containers: %+v", p)
	}
	if id, side := kubevirt.ComputeContainerID(p), p.Status.ContainerStatuses[1].ContainerID; id != "containerd://c0ffee" || side != "" {
		t.Fatalf("trimmed launcher keeps compute container ID %q and sidecar's %q; want only compute's", id, side)
	}
	if r := kubevirt.CheckLauncher(kt.Decode(vmiObject()), testNode, p); r != nil || !kubevirt.PodTerminated(p) || p.UID != launcherUID {
		t.Fatalf("trimmed launcher judged differently: %v, terminated %v", r, kubevirt.PodTerminated(p))
	}

	u := vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: attachUID})
	u.SetManagedFields(mf)
	u.SetAnnotations(map[string]string{"kubevirt.io/latest-observed-api-version": "v1"})
	_ = unstructured.SetNestedField(u.Object, map[string]any{"devices": map[string]any{"disks": []any{"big"}}}, "spec", "domain")
	entry := map[string]any{"name": "hp", "size": int64(9007199254740993), "containerDiskVolume": map[string]any{"checksum": int64(1)}}
	list, _, _ := unstructured.NestedSlice(u.Object, "status", "volumeStatus")
	list = append(list, entry)
	_ = unstructured.SetNestedSlice(u.Object, list, "status", "volumeStatus")
	r := recordOf(t, u)
	if r.decodeErr != nil || len(r.vmi.ManagedFields) != 0 || len(r.vmi.Annotations) != 0 {
		t.Fatalf("vmi record kept managedFields or annotations, or failed: %+v, %v", r.vmi, r.decodeErr)
	}
	want, got := kt.Decode(u), r.vmi
	if got.UID != want.UID || r.UID != want.UID || got.Labels[kubevirt.LabelNodeName] != testNode || len(got.Spec.Volumes) != 1 ||
		got.Status.VolumeStatusByName("hp") == nil || got.Status.ActivePods[launcherUID] != testNode {
		t.Fatalf("vmi record decodes to %+v, want what %+v has", got, want)
	}
	cached, err := r.volumeStatusList()
	if err != nil {
		t.Fatal(err)
	}
	sent, _ := json.Marshal(list)
	if kept, _ := json.Marshal(cached); string(kept) != string(sent) {
		t.Fatalf("cached volumeStatus is %s, the API server sent %s", kept, sent)
	}
	t.Run("malformed vmi is cached with its error", func(t *testing.T) {
		bad := vmiObject()
		_ = unstructured.SetNestedField(bad.Object, "not-a-list", "spec", "volumes")
		r := recordOf(t, bad)
		if r.vmi != nil || r.decodeErr == nil || r.Name != kt.VMIName || r.Namespace != testNS {
			t.Fatalf("record of a malformed vmi: %+v", r)
		}
		if vmi, err := decodeCached(r); vmi != nil || err == nil {
			t.Fatalf("decodeCached = %v, %v; want the decode error", vmi, err)
		}
	})
	t.Run("tombstone passes through", func(t *testing.T) {
		ts := cache.DeletedFinalStateUnknown{Key: "a/b", Obj: pod}
		for _, tr := range []cache.TransformFunc{TrimPod, RecordVMI} {
			if out, err := tr(ts); err != nil || out.(cache.DeletedFinalStateUnknown).Key != "a/b" {
				t.Fatalf("out %v err %v", out, err)
			}
		}
	})
}

func TestVMIKeysForPod(t *testing.T) {
	ta := newTestAgent(t, nil)
	ta.setVMI(t, vmiObject())
	ta.addPods(t, launcherPod())
	tests := []struct {
		name string
		pod  *corev1.Pod
		want []string
	}{
		{"launcher by owner", launcherPod(), []string{testKey}},
		{"launcher by created-by label", launcherPod(func(p *corev1.Pod) { p.OwnerReferences = nil }), []string{testKey}},
		{"attachment pod via launcher", attachmentPod(), []string{testKey}},
		{"attachment pod of unknown launcher", attachmentPod(func(p *corev1.Pod) { p.OwnerReferences[0].UID = otherPodUID }), nil},
		{"unrelated pod", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: "web"}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := ta.vmiKeysForPod(tt.pod); !slices.Equal(got, tt.want) {
				t.Fatalf("keys = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestRunAttachesAndLeavesMountsOnShutdown runs the whole loop against the
// fake clientsets: informers, queue, workers, resync, shutdown. The volume
// is attached, then resync passes run over it (each queues the VMI and the
// orphan sweep, which asks the engine for its launchers), and neither they
// nor the shutdown detach anything.
func TestRunAttachesAndLeavesMountsOnShutdown(t *testing.T) {
	obs := newKickObserver()
	ta := newTestAgent(t, func(c *Config) {
		c.ResyncPeriod = 50 * time.Millisecond
		c.Observer = obs
	}, pvc("c1", "pv-1"))
	ta.synced.Store(false)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	for _, p := range []*corev1.Pod{launcherPod(), attachmentPod()} {
		if _, err := ta.kube.CoreV1().Pods(testNS).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	u := vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: attachUID})
	if _, err := ta.dyn.Resource(kubevirt.VMIResource).Namespace(testNS).Create(ctx, u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- ta.Run(ctx) }()

	obs.waitUntil(t, 10*time.Second, "attach of hp", func() bool {
		ta.engine.mu.Lock()
		defer ta.engine.mu.Unlock()
		_, mounted := ta.engine.observed[launcherUID]["hp"]
		return mounted
	})
	// Three more sweeps are at least two resync passes (the one sweep not
	// queued by a resync is queued at start); three more observations of
	// the launcher are the VMI's own reconciles among them.
	sweeps, observes := ta.engine.count("launchers"), ta.engine.count("observe "+string(launcherUID))
	obs.waitUntil(t, 10*time.Second, "three resync passes", func() bool {
		return ta.engine.count("launchers") >= sweeps+3 && ta.engine.count("observe "+string(launcherUID)) >= observes+3
	})
	if n := ta.engine.count("detach"); n != 0 {
		t.Fatalf("detached while running: %v", ta.engine.changing())
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	if n := ta.engine.count("detach"); n != 0 {
		t.Fatalf("detached on shutdown: %v", ta.engine.changing())
	}
}

// TestPatientLWWaitsForTheServer: a watch refused while the API server is
// down waits for the gate's probe instead of failing into the reflector's
// backoff, and is made again once the server answers; an error the server
// answered with, and the end of the context, go to the caller at once.
func TestPatientLWWaitsForTheServer(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "", errors.New("no"))
	var up atomic.Bool
	var watches, probes atomic.Int32
	lw := &cache.ListWatch{
		ListWithContextFunc: func(context.Context, metav1.ListOptions) (runtime.Object, error) {
			return nil, forbidden
		},
		WatchFuncWithContext: func(context.Context, metav1.ListOptions) (watch.Interface, error) {
			watches.Add(1)
			if !up.Load() {
				return nil, refused
			}
			return watch.NewFake(), nil
		},
	}
	gate := &apiGate{log: slog.New(slog.DiscardHandler), probe: func(context.Context) error {
		probes.Add(1)
		up.Store(true)
		return nil
	}}
	p := &patientLW{ListerWatcher: cache.ToListWatcherWithWatchListSemantics(lw, nil), gate: gate}
	ctx := t.Context()

	w, err := p.WatchWithContext(ctx, metav1.ListOptions{})
	if err != nil || w == nil || watches.Load() != 2 || probes.Load() != 1 {
		t.Fatalf("watch: %v, %d calls, %d probes; want it made again after one probe", err, watches.Load(), probes.Load())
	}
	w.Stop()
	if _, err := p.ListWithContext(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) || probes.Load() != 1 {
		t.Fatalf("list: %v after %d probes; want the server's answer at once", err, probes.Load())
	}

	up.Store(false)
	gate.probe = func(context.Context) error { return refused }
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	if _, err := p.WatchWithContext(short, metav1.ListOptions{}); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("watch with the server down and the context ended: %v, want the refusal", err)
	}
}
