package agent

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	growErr   map[string]error
	grow      map[string]GrowResult
	calls     []string
}

var _ Engine = (*fakeEngine)(nil)

type fakeSnapshot struct{ n int }

func (s fakeSnapshot) Entries() int { return s.n }

func newFakeEngine() *fakeEngine {
	return &fakeEngine{
		observed:  map[types.UID]map[string]ObservedVolume{},
		attachErr: map[string]error{},
		growErr:   map[string]error{},
		grow:      map[string]GrowResult{},
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

func (f *fakeEngine) setObserved(l types.UID, obs ...ObservedVolume) {
	f.mu.Lock()
	defer f.mu.Unlock()
	m := map[string]ObservedVolume{}
	for _, o := range obs {
		m[o.Name] = o
	}
	f.observed[l] = m
}

func (f *fakeEngine) Attach(_ context.Context, _ Snapshot, v DesiredVolume) (Change, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("attach %s %s %s/%s", v.Name, v.Mode, v.Source.AttachmentPodUID, v.Source.PVName)
	if err := f.attachErr[v.Name]; err != nil {
		return Unchanged, err
	}
	if f.observed[v.LauncherUID] == nil {
		f.observed[v.LauncherUID] = map[string]ObservedVolume{}
	}
	if o, ok := f.observed[v.LauncherUID][v.Name]; ok && healthy(&o, v.Mode) {
		return Unchanged, nil
	}
	f.observed[v.LauncherUID][v.Name] = healthyObserved(v.Name, v.Mode)
	return Mounted, nil
}

func (f *fakeEngine) Detach(_ context.Context, _ Snapshot, l types.UID, o ObservedVolume) (Change, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("detach %s %s", l, o.Name)
	if _, ok := f.observed[l][o.Name]; !ok {
		return Unchanged, nil
	}
	delete(f.observed[l], o.Name)
	return Removed, nil
}

func (f *fakeEngine) Grow(_ context.Context, _ Snapshot, v DesiredVolume) (GrowResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.record("grow %s %d", v.Name, v.CapacityBytes)
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

func healthyObserved(name string, mode VolumeMode) ObservedVolume {
	if mode == Block {
		return ObservedVolume{Name: name, Mode: Block, DeviceMajor: 7, DeviceMinor: 3}
	}
	return ObservedVolume{Name: name, Mode: Filesystem, Mounted: true, Stacked: 1, SourceDev: "7:3", SourceRoot: "/disk.img"}
}

// Fixtures: VMI default/vm1 on node1 with launcher and attachment pod.
const (
	testNS       = "default"
	testVMI      = "vm1"
	testKey      = testNS + "/" + testVMI
	testNode     = "node1"
	vmiUID       = types.UID("vmi-uid")
	launcherUID  = types.UID("launcher-uid")
	attachUID    = types.UID("attach-uid")
	otherPodUID  = types.UID("other-uid")
	testCapacity = "10Gi"
)

func launcherPod(mut ...func(*corev1.Pod)) *corev1.Pod {
	ctrl := true
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: testNS, Name: "virt-launcher-vm1-abcde", UID: launcherUID,
			Labels: map[string]string{LabelApp: AppVirtLauncher, LabelCreatedBy: string(vmiUID)},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: VMIAPIVersion, Kind: VMIKind, Name: testVMI, UID: vmiUID, Controller: &ctrl,
			}},
		},
		Spec: corev1.PodSpec{
			NodeName: testNode,
			Volumes: []corev1.Volume{{
				Name: HotplugDisksVolume, VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}},
			}},
		},
	}
	for _, m := range mut {
		m(p)
	}
	return p
}

func attachmentPod(mut ...func(*corev1.Pod)) *corev1.Pod {
	ctrl := true
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: testNS, Name: "hp-volume-xyz12", UID: attachUID,
			Labels: map[string]string{LabelApp: AppHotplugDisk},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Pod", Name: "virt-launcher-vm1-abcde", UID: launcherUID, Controller: &ctrl,
			}},
		},
		Spec: corev1.PodSpec{NodeName: testNode},
	}
	for _, m := range mut {
		m(p)
	}
	return p
}

// vol describes one volume of a VMI fixture.
type vol struct {
	name, claim string
	dataVolume  bool
	notHotplug  bool
	noStatus    bool
	attachUID   types.UID
	mode        string
	capacity    string
	phase       string
}

func vmiObject(vols ...vol) *unstructured.Unstructured {
	var specVols, statuses []any
	for _, v := range vols {
		src := map[string]any{"hotpluggable": !v.notHotplug}
		sv := map[string]any{"name": v.name}
		if v.dataVolume {
			src["name"] = v.claim
			sv["dataVolume"] = src
		} else {
			src["claimName"] = v.claim
			sv["persistentVolumeClaim"] = src
		}
		specVols = append(specVols, sv)
		if v.noStatus {
			continue
		}
		capacity := v.capacity
		if capacity == "" {
			capacity = testCapacity
		}
		info := map[string]any{
			"claimName":          v.claim,
			"capacity":           map[string]any{"storage": capacity},
			"requests":           map[string]any{"storage": capacity},
			"filesystemOverhead": "0.055",
		}
		if v.mode != "" {
			info["volumeMode"] = v.mode
		}
		st := map[string]any{
			"name": v.name, "target": "", "phase": "AttachedToNode",
			"persistentVolumeClaimInfo": info,
		}
		if v.phase != "" {
			st["phase"] = v.phase
		}
		if v.attachUID != "" {
			st["hotplugVolume"] = map[string]any{"attachPodName": "hp-volume-xyz12", "attachPodUID": string(v.attachUID)}
		}
		statuses = append(statuses, st)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": VMIAPIVersion,
		"kind":       VMIKind,
		"metadata": map[string]any{
			"namespace": testNS, "name": testVMI, "uid": string(vmiUID), "resourceVersion": "1",
			"labels": map[string]any{LabelNodeName: testNode},
		},
		"spec": map[string]any{"volumes": specVols},
		"status": map[string]any{
			"nodeName":     testNode,
			"activePods":   map[string]any{string(launcherUID): testNode},
			"volumeStatus": statuses,
		},
	}}
	return u
}

func pvc(name, pv string) *corev1.PersistentVolumeClaim {
	return &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: testNS, Name: name},
		Spec:       corev1.PersistentVolumeClaimSpec{VolumeName: pv},
	}
}

// testAgent is an agent whose informer caches are filled by hand.
type testAgent struct {
	*Agent
	kube     *kubefake.Clientset
	dyn      *dynamicfake.FakeDynamicClient
	engine   *fakeEngine
	recorder *record.FakeRecorder
}

func newTestAgent(t *testing.T, mut func(*Config), kubeObjs ...runtime.Object) *testAgent {
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
		map[schema.GroupVersionResource]string{VMIResource: "VirtualMachineInstanceList"})
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

func (ta *testAgent) addPods(t *testing.T, pods ...*corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		if err := ta.podInformer.GetIndexer().Add(p); err != nil {
			t.Fatalf("add pod: %v", err)
		}
	}
}

func (ta *testAgent) setVMI(t *testing.T, u *unstructured.Unstructured) {
	t.Helper()
	if err := ta.vmiInformer.GetIndexer().Add(u); err != nil {
		t.Fatalf("add vmi: %v", err)
	}
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
