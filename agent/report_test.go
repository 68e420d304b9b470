// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	kt "github.com/hpmount/hpmount/kubevirt/kubevirttest"

	"github.com/hpmount/hpmount/kubevirt"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"
)

func TestVolumeStatusPatchShape(t *testing.T) {
	u := vmiObject(
		vol{Name: "a", Claim: "ca", AttachUID: attachUID},
		vol{Name: "b", Claim: "cb", AttachUID: attachUID, Phase: kubevirt.PhaseReady},
		vol{Name: "c", Claim: "cc", AttachUID: attachUID},
	)
	updates := map[string]statusUpdate{
		"a": {kubevirt.PhaseMountedToPod, kubevirt.ReasonMountedToPod, "Volume a has been mounted in virt-launcher pod"},
		"b": {kubevirt.PhaseMountedToPod, kubevirt.ReasonMountedToPod, "never regress Ready"},
	}
	raw, err := volumeStatusPatch(cachedStatus(t, u), updates)
	if err != nil {
		t.Fatal(err)
	}
	var ops []map[string]any
	if err := json.Unmarshal(raw, &ops); err != nil {
		t.Fatal(err)
	}
	if len(ops) != 2 {
		t.Fatalf("ops = %s", raw)
	}
	if ops[0]["op"] != "test" || ops[0]["path"] != "/status/volumeStatus" || len(ops[0]["value"].([]any)) != 3 {
		t.Fatalf("first op = %v", ops[0])
	}
	if ops[1]["op"] != "replace" || ops[1]["path"] != "/status/volumeStatus/0" {
		t.Fatalf("second op = %v", ops[1])
	}
	entry := ops[1]["value"].(map[string]any)
	if entry["phase"] != kubevirt.PhaseMountedToPod || entry["reason"] != kubevirt.ReasonMountedToPod || entry["name"] != "a" || entry["hotplugVolume"] == nil {
		t.Fatalf("replaced entry = %v", entry)
	}

	// Nothing to change: no patch.
	done := vmiObject(vol{Name: "a", Claim: "ca", AttachUID: attachUID, Phase: kubevirt.PhaseMountedToPod})
	if raw, err := volumeStatusPatch(cachedStatus(t, done), updates); err != nil || raw != nil {
		t.Fatalf("patch = %s, %v", raw, err)
	}
}

// cachedStatus is u's status.volumeStatus as the VMI cache gives it.
func cachedStatus(t testing.TB, u *unstructured.Unstructured) []any {
	t.Helper()
	list, err := recordOf(t, u).volumeStatusList()
	if err != nil {
		t.Fatal(err)
	}
	return list
}

func TestPatchVolumeStatusRetriesOnConflict(t *testing.T) {
	ta := newTestAgent(t, func(c *Config) { c.ReportVolumeStatus = true })
	u := vmiObject(vol{Name: "a", Claim: "ca", AttachUID: attachUID})
	ctx := context.Background()
	if _, err := ta.dyn.Resource(kubevirt.VMIResource).Namespace(testNS).Create(ctx, u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	patches, conflicts := 0, 1
	ta.dyn.PrependReactor("patch", "virtualmachineinstances", func(a k8stesting.Action) (bool, runtime.Object, error) {
		patches++
		if pa := a.(k8stesting.PatchAction); pa.GetSubresource() != "" {
			t.Errorf("patched subresource %q; the VMI CRD has none", pa.GetSubresource())
		}
		if conflicts > 0 {
			conflicts--
			return true, nil, apierrors.NewConflict(schema.GroupResource{Group: "kubevirt.io", Resource: "virtualmachineinstances"}, kt.VMIName, nil)
		}
		return false, nil, nil
	})
	err := ta.patchVolumeStatus(ctx, u.GetNamespace(), u.GetName(), cachedStatus(t, u), map[string]statusUpdate{"a": {kubevirt.PhaseMountedToPod, kubevirt.ReasonMountedToPod, "mounted"}})
	if err != nil {
		t.Fatal(err)
	}
	if patches != 2 {
		t.Fatalf("patches = %d, want 2 (conflict then success)", patches)
	}
	got, err := ta.dyn.Resource(kubevirt.VMIResource).Namespace(testNS).Get(ctx, kt.VMIName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	list, _, _ := unstructured.NestedSlice(got.Object, "status", "volumeStatus")
	if phase := list[0].(map[string]any)["phase"]; phase != kubevirt.PhaseMountedToPod {
		t.Fatalf("phase = %v", phase)
	}
}

func TestReconcileReportsVolumeStatus(t *testing.T) {
	ta := standardAgent(t, func(c *Config) { c.ReportVolumeStatus = true })
	u := vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: attachUID})
	ctx := context.Background()
	if _, err := ta.dyn.Resource(kubevirt.VMIResource).Namespace(testNS).Create(ctx, u, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	ta.setVMI(t, u)
	if err := ta.reconcile(ctx, testKey); err != nil {
		t.Fatal(err)
	}
	// The status goes out from its own queue, off the reconcile path.
	if n := ta.status.queue.Len(); n != 1 {
		t.Fatalf("%d status writes queued, want 1", n)
	}
	if err := ta.writeStatus(ctx, testKey); err != nil {
		t.Fatal(err)
	}
	got, err := ta.dyn.Resource(kubevirt.VMIResource).Namespace(testNS).Get(ctx, kt.VMIName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	list, _, _ := unstructured.NestedSlice(got.Object, "status", "volumeStatus")
	e := list[0].(map[string]any)
	if e["phase"] != kubevirt.PhaseMountedToPod || e["message"] != "Volume hp has been mounted in virt-launcher pod" {
		t.Fatalf("entry = %v", e)
	}
}

func TestHealthHandler(t *testing.T) {
	var gateErr, liveErr error
	ta := newTestAgent(t, func(c *Config) {
		c.ReadinessGate = func(context.Context) error { return gateErr }
		c.LivenessCheck = func() error { return liveErr }
	})
	ta.synced.Store(false)
	srv := httptest.NewServer(ta.HealthHandler())
	t.Cleanup(srv.Close)
	status := func(path string) int {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if s := status("/healthz"); s != 200 {
		t.Fatalf("healthz = %d", s)
	}
	if s := status("/readyz"); s != 503 {
		t.Fatalf("readyz before sync = %d", s)
	}
	ta.synced.Store(true)
	gateErr = context.DeadlineExceeded
	if s := status("/readyz"); s != 503 {
		t.Fatalf("readyz with failing gate = %d", s)
	}
	gateErr = nil
	if s := status("/readyz"); s != 200 {
		t.Fatalf("readyz = %d", s)
	}
	liveErr = errors.New("a call has been stuck for 6m")
	if s := status("/healthz"); s != 503 {
		t.Fatalf("healthz with a stuck call = %d", s)
	}
}

// reconciles counts what report observes of passes and attaches.
type reconciles struct {
	latencies
	passes int
}

func (r *reconciles) Reconciled(time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.passes++
}

// TestReportObserves: report alone observes a pass, one that failed
// before reading the world too, and never a negative latency or phase.
func TestReportObserves(t *testing.T) {
	obs := &reconciles{}
	ta := standardAgent(t, func(c *Config) { c.Observer = obs })
	ta.synced.Store(false)
	if err := ta.reconcile(context.Background(), testKey); err == nil {
		t.Fatal("a reconcile before the caches synced succeeded")
	}
	if obs.passes != 1 {
		t.Fatalf("%d reconciles observed, want 1", obs.passes)
	}
	err := ta.report(passReport{Key: testKey, Attaches: []attachTiming{
		{Volume: "hp", Mode: "Filesystem", Total: -time.Second, Phases: []phaseTime{{AttachPhaseMounted, time.Millisecond}}},
		{Volume: "hp", Mode: "Filesystem", Total: time.Second, Phases: []phaseTime{{AttachPhasePodCreated, -time.Second}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(obs.got) != 1 || obs.got[0] != time.Second || !slices.Equal(obs.phases, []string{AttachPhaseMounted}) {
		t.Fatalf("observed latencies %v and phases %v, want 1s and mounted", obs.got, obs.phases)
	}
	if obs.passes != 1 {
		t.Fatalf("a report without a start observed a reconcile: %d", obs.passes)
	}
}

// claims records the claims reported of each volume, by name.
type claims struct {
	NopObserver
	mu  sync.Mutex
	got map[string]string
}

func (c *claims) VolumeClaim(_, _, volume, claim string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.got[volume] = claim
}

// TestReportsVolumeClaims: a pass reports each volume's claim, the
// persistentvolumeclaim label of its series, pending volumes' too.
func TestReportsVolumeClaims(t *testing.T) {
	for _, tt := range []struct {
		name   string
		attach types.UID
	}{
		{"mounted", attachUID},
		{"pending, no attachment pod yet", ""},
	} {
		t.Run(tt.name, func(t *testing.T) {
			obs := &claims{got: map[string]string{}}
			ta := standardAgent(t, func(c *Config) { c.Observer = obs })
			ta.setVMI(t, vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: tt.attach}, vol{Name: "blk", Claim: "c2", AttachUID: tt.attach, Mode: "Block"}))
			ta.mustReconcile(t)
			if want := map[string]string{"hp": "c1", "blk": "c2"}; !maps.Equal(obs.got, want) {
				t.Errorf("claims reported %v, want %v", obs.got, want)
			}
		})
	}
}
