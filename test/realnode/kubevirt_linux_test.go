// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/hpmount/hpmount/test/csiplugin"
	"github.com/hpmount/hpmount/test/harness"
	"github.com/hpmount/hpmount/test/simnode"
)

// hotplugDir is where the launcher's compute container sees hotplug-disks.
const hotplugDir = "/var/run/kubevirt/hotplug-disks"

// vm is one VMI on the real node: its launcher pod really runs busybox as
// "compute", its attachment pods really mount the claims.
type vm struct {
	e        *env
	ctrl     *simnode.Controller
	ns, name string
	uid      types.UID
	launcher *corev1.Pod
	vols     []simnode.Volume
	pods     map[string]*corev1.Pod // volume name → attachment pod
}

func (e *env) controller(t *testing.T) *simnode.Controller {
	dyn, err := dynamic.NewForConfig(e.admin)
	if err != nil {
		t.Fatal(err)
	}
	return &simnode.Controller{Kube: e.kube, Dyn: dyn}
}

// newVM creates the VMI shell and its launcher pod and waits until the
// launcher runs.
func (e *env) newVM(t *testing.T, ctx context.Context, ns, name string) *vm {
	t.Helper()
	v := &vm{e: e, ctrl: e.controller(t), ns: ns, name: name, pods: map[string]*corev1.Pod{}}
	if err := v.ctrl.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	shell, err := v.ctrl.CreateVMIShell(ctx, ns, name, testNode)
	if err != nil {
		t.Fatal(err)
	}
	v.uid = shell.GetUID()
	prop := corev1.MountPropagationHostToContainer
	pod := BusyboxPod(ns, "virt-launcher-"+name, testNode)
	pod.Labels = map[string]string{"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": string(v.uid)}
	pod.Spec.Containers[0].Name = "compute"
	pod.Spec.Containers[0].VolumeMounts = []corev1.VolumeMount{{
		Name: "hotplug-disks", MountPath: hotplugDir, MountPropagation: &prop,
	}}
	pod.Spec.Volumes = []corev1.Volume{{Name: "hotplug-disks",
		VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	if _, err := e.kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if v.launcher, err = WaitRunning(ctx, e.kube, ns, pod.Name); err != nil {
		t.Fatalf("%v\n%s", err, e.node.Logs(30))
	}
	return v
}

// addVolume makes a sparse backing file, a static PV of the test CSI
// driver naming it, and a claim bound to it (status written here: no
// controller-manager runs). fstype "" makes a block volume.
func (v *vm) addVolume(t *testing.T, ctx context.Context, name, fstype string, size int64) simnode.Volume {
	t.Helper()
	vol := simnode.Volume{Name: name, Claim: v.name + "-" + name, PV: "pv-" + v.name + "-" + name,
		Block: fstype == "", Capacity: simnode.Mi(size >> 20)}
	backing := v.backing(vol)
	if err := os.MkdirAll(filepath.Dir(backing), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(backing, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(backing, size); err != nil {
		t.Fatal(err)
	}
	if err := v.ctrl.CreatePVC(ctx, v.ns, vol); err != nil {
		t.Fatal(err)
	}
	pvc, err := v.e.kube.CoreV1().PersistentVolumeClaims(v.ns).Get(ctx, vol.Claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mode := corev1.PersistentVolumeFilesystem
	if vol.Block {
		mode = corev1.PersistentVolumeBlock
	}
	pv := &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: vol.PV},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse(vol.Capacity)},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode:                    &mode,
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: v.ns, Name: vol.Claim, UID: pvc.UID},
			PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{
				Driver: csiplugin.DriverName, VolumeHandle: vol.PV, FSType: fstype,
				VolumeAttributes: map[string]string{csiplugin.AttrBackingFile: backing, csiplugin.AttrFSType: fstype},
			}},
		},
	}
	created, err := v.e.kube.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Status.Phase = corev1.VolumeBound
	if _, err := v.e.kube.CoreV1().PersistentVolumes().UpdateStatus(ctx, created, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	v.setClaimStatus(t, ctx, vol, func(st *corev1.PersistentVolumeClaimStatus) {
		st.Phase = corev1.ClaimBound
		st.AccessModes = pv.Spec.AccessModes
		st.Capacity = pv.Spec.Capacity
	})
	v.vols = append(v.vols, vol)
	return vol
}

// backing is the file behind the volume.
func (v *vm) backing(vol simnode.Volume) string { return filepath.Join(v.e.node.Dir, "disks", vol.PV) }

func (v *vm) setClaimStatus(t *testing.T, ctx context.Context, vol simnode.Volume, f func(*corev1.PersistentVolumeClaimStatus)) {
	t.Helper()
	pvc, err := v.e.kube.CoreV1().PersistentVolumeClaims(v.ns).Get(ctx, vol.Claim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f(&pvc.Status)
	if _, err := v.e.kube.CoreV1().PersistentVolumeClaims(v.ns).UpdateStatus(ctx, pvc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// attach creates an hp-volume pod, controlled by the launcher, that lists
// the claims of listed and uses (volumeMounts, or volumeDevices for block)
// those of used, waits until it runs, and records it as the attachment pod
// of used.
func (v *vm) attach(t *testing.T, ctx context.Context, listed, used []simnode.Volume) *corev1.Pod {
	t.Helper()
	pod := BusyboxPod(v.ns, "", testNode)
	pod.GenerateName = "hp-volume-"
	pod.Labels = map[string]string{"kubevirt.io": "hotplug-disk"}
	yes := true
	pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "Pod",
		Name: v.launcher.Name, UID: v.launcher.UID, Controller: &yes, BlockOwnerDeletion: &yes}}
	c := &pod.Spec.Containers[0]
	c.Name = "hotplug-disk"
	for _, vol := range listed {
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{Name: vol.Name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: vol.Claim}}})
	}
	for _, vol := range used {
		if vol.Block {
			c.VolumeDevices = append(c.VolumeDevices, corev1.VolumeDevice{Name: vol.Name, DevicePath: "/path/" + vol.Name})
		} else {
			c.VolumeMounts = append(c.VolumeMounts, corev1.VolumeMount{Name: vol.Name, MountPath: "/path/" + vol.Name})
		}
	}
	created, err := v.e.kube.CoreV1().Pods(v.ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if created, err = WaitRunning(ctx, v.e.kube, v.ns, created.Name); err != nil {
		t.Fatalf("%v\n%s", err, v.e.node.Logs(40))
	}
	for _, vol := range used {
		v.pods[vol.Name] = created
	}
	return created
}

// apply writes the VMI as virt-controller has it: every volume hotplugged,
// each status naming its attachment pod by name and UID.
func (v *vm) apply(t *testing.T, ctx context.Context) {
	t.Helper()
	s := simnode.VMISpec{Namespace: v.ns, Name: v.name, Node: testNode, Launcher: v.launcher.UID,
		Attachment: map[string]types.UID{}, Volumes: v.vols}
	for name, pod := range v.pods {
		s.Attachment[name] = pod.UID
	}
	obj, err := v.ctrl.ApplyVMI(ctx, s)
	if err != nil {
		t.Fatal(err)
	}
	// simnode names every attachment pod "hp-volume"; KubeVirt writes its name.
	statuses, _, _ := unstructured.NestedSlice(obj.Object, "status", "volumeStatus")
	for _, st := range statuses {
		m := st.(map[string]any)
		if hp, ok := m["hotplugVolume"].(map[string]any); ok {
			hp["attachPodName"] = v.pods[m["name"].(string)].Name
		}
	}
	_ = unstructured.SetNestedSlice(obj.Object, statuses, "status", "volumeStatus")
	if _, err := v.ctrl.Dyn.Resource(simnode.VMIResource).Namespace(v.ns).Update(ctx, obj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// exec runs a shell script in the launcher's compute container through the
// API server.
func (v *vm) exec(ctx context.Context, script string) (string, error) {
	return Exec(ctx, v.e.admin, v.ns, v.launcher.Name, "compute", "sh", "-c", script)
}

// importDiskImage writes the filesystem volume's disk.img through the
// attachment pod, as CDI's import would have: the shipped agent never
// creates one (no --create-disk-images in deploy/ or the chart).
func (v *vm) importDiskImage(t *testing.T, ctx context.Context, pod *corev1.Pod, vol simnode.Volume) {
	t.Helper()
	img := "/path/" + vol.Name + "/disk.img"
	if _, err := Exec(ctx, v.e.admin, v.ns, pod.Name, "hotplug-disk", "sh", "-c",
		"truncate -s 32M "+img+" && chown 107:107 "+img); err != nil {
		t.Fatal(err)
	}
}

// target is the volume's path in the launcher container.
func target(vol simnode.Volume) string {
	if vol.Block {
		return hotplugDir + "/" + vol.Name
	}
	return hotplugDir + "/" + vol.Name + ".img"
}

var sharedAgent struct {
	mu    sync.Mutex
	agent *harness.Agent
}

// agent starts the built hpmount binary for the package unless it runs, on
// the host (this test process's mount namespace, --host-pid), with the
// DaemonSet's flags pointed at the real node: kubelet root, /sys/fs/cgroup,
// and the RBAC of deploy/. One agent at a time acts on the node: the
// deployed agent's test stops this one first (stopHostAgent).
func (e *env) agent(t *testing.T, ctx context.Context) *harness.Agent {
	t.Helper()
	sharedAgent.mu.Lock()
	defer sharedAgent.mu.Unlock()
	if sharedAgent.agent == nil {
		a, err := e.startAgent(ctx)
		if err != nil {
			t.Fatalf("start agent: %v", err)
		}
		sharedAgent.agent = a
	}
	a := sharedAgent.agent
	e.agentLog = func(context.Context) string { return a.Log() }
	return sharedAgent.agent
}

// stopHostAgent stops the host agent if it runs.
func stopHostAgent() {
	sharedAgent.mu.Lock()
	defer sharedAgent.mu.Unlock()
	if sharedAgent.agent != nil {
		sharedAgent.agent.Stop()
		sharedAgent.agent = nil
	}
}

func (e *env) startAgent(ctx context.Context) (*harness.Agent, error) {
	bin, err := harness.Binary()
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(e.admin)
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(e.dir, "agent.kubeconfig")
	ctrl := &simnode.Controller{Kube: e.kube, Dyn: dyn}
	if _, err := harness.AgentKubeconfig(ctx, e.cluster, ctrl, "", kubeconfig); err != nil {
		return nil, err
	}
	node := &simnode.Node{Name: testNode, KubeletRoot: e.node.KubeletRoot, CgroupRoot: "/sys/fs/cgroup"}
	a, err := harness.StartAgent(harness.AgentOptions{Binary: bin, Kubeconfig: kubeconfig, Node: node,
		Args: []string{"--create-disk-images"}})
	if err != nil {
		return nil, err
	}
	if err := harness.Eventually(ctx, "agent ready", time.Minute, a.Ready); err != nil {
		a.Stop()
		return nil, err
	}
	return a, nil
}
