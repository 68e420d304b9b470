package agent

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/hpmount/hpmount/kubevirt"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/tools/cache"
)

func TestDropManagedFields(t *testing.T) {
	mf := []metav1.ManagedFieldsEntry{{Manager: "virt-controller", Operation: metav1.ManagedFieldsOperationUpdate}}
	pod := launcherPod(func(p *corev1.Pod) { p.ManagedFields = mf })
	u := vmiObject()
	u.SetManagedFields(mf)
	tests := []struct {
		name string
		obj  any
		get  func(any) []metav1.ManagedFieldsEntry
	}{
		{"pod", pod, func(o any) []metav1.ManagedFieldsEntry { return o.(*corev1.Pod).ManagedFields }},
		{"vmi", u, func(o any) []metav1.ManagedFieldsEntry { return o.(*unstructured.Unstructured).GetManagedFields() }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			out, err := DropManagedFields(tt.obj)
			if err != nil {
				t.Fatal(err)
			}
			if mf := tt.get(out); len(mf) != 0 {
				t.Fatalf("managedFields kept: %v", mf)
			}
		})
	}
	t.Run("tombstone passes through", func(t *testing.T) {
		ts := cache.DeletedFinalStateUnknown{Key: "a/b", Obj: pod}
		if out, err := DropManagedFields(ts); err != nil || out.(cache.DeletedFinalStateUnknown).Key != "a/b" {
			t.Fatalf("out %v err %v", out, err)
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
// fake clientsets: informers, queue, workers, shutdown.
func TestRunAttachesAndLeavesMountsOnShutdown(t *testing.T) {
	ta := newTestAgent(t, func(c *Config) { c.ResyncPeriod = 50 * time.Millisecond }, pvc("c1", "pv-1"))
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

	deadline := time.Now().Add(10 * time.Second)
	for {
		ta.engine.mu.Lock()
		_, mounted := ta.engine.observed[launcherUID]["hp"]
		ta.engine.mu.Unlock()
		if mounted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("volume not attached; calls %v", ta.engine.changing())
		}
		time.Sleep(10 * time.Millisecond)
	}
	time.Sleep(150 * time.Millisecond) // let a few resyncs run
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	for _, c := range ta.engine.changing() {
		if strings.HasPrefix(c, "detach") {
			t.Fatalf("detached on shutdown: %v", ta.engine.changing())
		}
	}
}
