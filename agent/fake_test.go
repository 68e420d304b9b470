// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	kt "github.com/hpmount/hpmount/kubevirt/kubevirttest"

	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/outcome"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
)

// fakeEngine records every call and keeps observed state per launcher, so
// that an Attach makes the next Observe see a healthy entry.
type fakeEngine struct {
	mu        sync.Mutex
	observed  map[types.UID]map[string]ObservedVolume
	attachErr map[string]error
	detachErr map[string]error
	growErr   map[string]error
	grow      map[string]GrowResult
	calls     []string
	// compute is the compute container each volume was last attached for.
	compute map[string]string
	// growing, when set, receives every Grow as it starts, and the Grow
	// returns only once released is closed: a filesystem frozen under it.
	growing  chan string
	released chan struct{}
	// growHang holds the Grow of a volume until its channel is closed.
	growHang map[string]chan struct{}
	// verified is what an Attach of a volume already healthy returns
	// (Unchanged when not set): Created is a block rule allowed again.
	verified map[string]outcome.Result
	// handler is virt-handler's record by VMI; handlerErr fails its read.
	handler    map[types.UID]HandlerRecord
	handlerErr error
}

var _ Engine = (*fakeEngine)(nil)

type fakeSnapshot struct{ n int }

func (s fakeSnapshot) Entries() int { return s.n }

func (s fakeSnapshot) Unparsed() (int, error) { return 0, nil }

func newFakeEngine() *fakeEngine {
	return &fakeEngine{
		observed:  map[types.UID]map[string]ObservedVolume{},
		attachErr: map[string]error{},
		detachErr: map[string]error{},
		growErr:   map[string]error{},
		grow:      map[string]GrowResult{},
		compute:   map[string]string{},
	}
}

func (f *fakeEngine) record(format string, args ...any) {
	f.calls = append(f.calls, fmt.Sprintf(format, args...))
}

func (f *fakeEngine) Snapshot(context.Context) (Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("snapshot")
	return fakeSnapshot{n: 42}, nil
}

func (f *fakeEngine) Observe(_ context.Context, _ Snapshot, l types.UID) ([]ObservedVolume, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("observe %s", l)
	var out []ObservedVolume
	for _, o := range f.observed[l] {
		out = append(out, o)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func (f *fakeEngine) Launchers(context.Context, Snapshot) ([]types.UID, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("launchers")
	var out []types.UID
	for uid, obs := range f.observed {
		if len(obs) > 0 {
			out = append(out, uid)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out, nil
}

func (f *fakeEngine) HandlerRecord(_ context.Context, vmi types.UID) (HandlerRecord, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("handler record %s", vmi)
	return f.handler[vmi], f.handlerErr
}

func (f *fakeEngine) setObserved(l types.UID, obs ...ObservedVolume) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := map[string]ObservedVolume{}
	for _, o := range obs {
		m[o.Name] = o
	}
	f.observed[l] = m
}

func (f *fakeEngine) Attach(_ context.Context, _ Snapshot, v DesiredVolume) (outcome.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("attach %s %s %s/%s", v.Name, v.Mode, v.Source.AttachmentPodUID, v.Source.PVName)
	f.compute[v.Name] = v.ComputeContainerID
	if err := f.attachErr[v.Name]; err != nil {
		return outcome.Unchanged, err
	}
	if f.observed[v.LauncherUID] == nil {
		f.observed[v.LauncherUID] = map[string]ObservedVolume{}
	}
	if o, ok := f.observed[v.LauncherUID][v.Name]; ok && o.Healthy(v.Mode) {
		if r, ok := f.verified[v.Name]; ok {
			return r, nil
		}
		return outcome.Unchanged, nil
	}
	f.observed[v.LauncherUID][v.Name] = healthyObserved(v.Name, v.Mode)
	return outcome.Mounted, nil
}

func (f *fakeEngine) Detach(_ context.Context, _ Snapshot, l types.UID, o ObservedVolume) (outcome.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("detach %s %s", l, o.Name)
	if err := f.detachErr[o.Name]; err != nil {
		return outcome.Unchanged, err
	}
	if _, ok := f.observed[l][o.Name]; !ok {
		return outcome.Unchanged, nil
	}
	delete(f.observed[l], o.Name)
	return outcome.Removed, nil
}

func (f *fakeEngine) Grow(_ context.Context, _ Snapshot, v DesiredVolume) (GrowResult, error) {
	f.mu.Lock()
	f.record("grow %s %d", v.Name, v.CapacityBytes)
	growing, released := f.growing, f.released
	hang := f.growHang[v.Name]
	f.mu.Unlock()
	if hang != nil {
		<-hang
	}
	if growing != nil {
		growing <- v.Name
		<-released
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.grow[v.Name], f.growErr[v.Name]
}

// changing returns the calls that could change the node.
func (f *fakeEngine) changing() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		if strings.HasPrefix(c, "attach") || strings.HasPrefix(c, "detach") || strings.HasPrefix(c, "grow") {
			out = append(out, c)
		}
	}
	return out
}

func (f *fakeEngine) reset() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = nil
}

func healthyObserved(name string, mode kubevirt.VolumeMode) ObservedVolume {
	switch mode {
	case kubevirt.Block:
		return ObservedVolume{Name: name, Mode: kubevirt.Block, DeviceMajor: 7, DeviceMinor: 3}
	case kubevirt.Directory:
		return ObservedVolume{Name: name, Mode: kubevirt.Directory, Mounted: true, Stacked: 1, SourceDev: "7:3", SourceRoot: "/"}
	}
	return ObservedVolume{Name: name, Mode: kubevirt.Filesystem, Mounted: true, Stacked: 1, SourceDev: "7:3", SourceRoot: "/disk.img"}
}

// Fixtures: VMI default/vm1 on node1 with launcher and attachment pod,
// from kubevirttest, under the short names the tests use.
const (
	testNS      = kt.Namespace
	testKey     = kt.Key
	testNode    = kt.Node
	launcherUID = kt.LauncherUID
	attachUID   = kt.AttachUID
	otherPodUID = kt.OtherPodUID
)

var (
	launcherPod   = kt.Launcher
	attachmentPod = kt.AttachmentPod
	vmiObject     = kt.VMIObject
	pvc           = kt.PVC
)

type vol = kt.Vol

// testAgent is an agent whose informer caches are filled by hand.
type testAgent struct {
	*Agent
	kube     *kubefake.Clientset
	dyn      *dynamicfake.FakeDynamicClient
	engine   *fakeEngine
	recorder *record.FakeRecorder
}

func newTestAgent(t testing.TB, mut func(*Config), kubeObjs ...runtime.Object) *testAgent {
	t.Helper()
	cfg := DefaultConfig()
	cfg.NodeName = testNode
	cfg.HealthAddress = ""
	cfg.MetricsAddress = ""
	if mut != nil {
		mut(&cfg)
	}
	kube := kubefake.NewClientset(kubeObjs...)
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{kubevirt.VMIResource: "VirtualMachineInstanceList"})
	eng := newFakeEngine()
	a, err := New(cfg, kube, dyn, eng)
	if err != nil {
		t.Fatalf("new agent: %v", err)
	}
	rec := record.NewFakeRecorder(1000)
	a.recorder = rec
	a.synced.Store(true)
	t.Cleanup(a.broadcaster.Shutdown)
	return &testAgent{Agent: a, kube: kube, dyn: dyn, engine: eng, recorder: rec}
}

func (ta *testAgent) addPods(t testing.TB, pods ...*corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		if err := ta.podInformer.GetIndexer().Add(p); err != nil {
			t.Fatalf("add pod: %v", err)
		}
	}
}

func (ta *testAgent) setVMI(t testing.TB, u *unstructured.Unstructured) {
	t.Helper()
	if err := ta.vmiInformer.GetIndexer().Add(recordOf(t, u)); err != nil {
		t.Fatalf("add vmi: %v", err)
	}
}

// recordOf is u as the VMI informers cache it.
func recordOf(t testing.TB, u *unstructured.Unstructured) *vmiRecord {
	t.Helper()
	out, err := RecordVMI(u)
	if err != nil {
		t.Fatalf("record vmi: %v", err)
	}
	return out.(*vmiRecord)
}

func (ta *testAgent) events() []string {
	var out []string
	for {
		select {
		case e := <-ta.recorder.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

func hasEvent(events []string, prefix string) bool {
	for _, e := range events {
		if strings.HasPrefix(e, prefix) {
			return true
		}
	}
	return false
}

// growPass reconciles the test VMI, runs the growth checks that pass
// queued as the growth runner's loop would, and reconciles again, which
// reports them.
func (ta *testAgent) growPass(t testing.TB) {
	t.Helper()
	ctx := context.Background()
	if err := ta.reconcile(ctx, testKey); err != nil {
		t.Fatal(err)
	}
	ta.runGrowth(ctx)
	ta.growth.running.Wait()
	for ta.queue.Len() > 0 {
		key, _ := ta.queue.Get()
		ta.queue.Done(key)
	}
	if err := ta.reconcile(ctx, testKey); err != nil {
		t.Fatal(err)
	}
}

// stateFor returns what the agent remembers of key for the VMI uid,
// remembering a new state if needed, for a test to set up.
func (a *Agent) stateFor(key string, uid types.UID) *vmiState {
	a.mu.Lock()
	defer a.mu.Unlock()
	st, ok := a.states[key]
	if !ok || st.uid != uid {
		st = stateFor(st, uid)
		a.states[key] = st
	}
	return st
}
