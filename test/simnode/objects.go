// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package simnode

import (
	"cmp"
	"context"
	"fmt"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// VMIResource is the VirtualMachineInstance resource.
var VMIResource = schema.GroupVersionResource{Group: "kubevirt.io", Version: "v1", Resource: "virtualmachineinstances"}

// Controller plays virt-controller against a real API server: it creates
// and updates the pods, PVCs and VMIs that the agent watches.
type Controller struct {
	Kube kubernetes.Interface
	Dyn  dynamic.Interface
}

// Volume is one hotplug volume as the VMI describes it.
type Volume struct {
	Name, Claim, PV string
	Block           bool
	Capacity        string // status.capacity, e.g. "400Mi"
	// Requests is spec.resources.requests; empty means Capacity. After an
	// expansion whose NodeExpandVolume never ran, it is the larger one.
	Requests string
	// Hotpluggable false makes it an ordinary (boot) volume.
	NotHotpluggable bool
	// Mode, when set, is the status' volumeMode instead of the one Block
	// implies: a hostile or broken controller's value.
	Mode string
}

// CreatePVC creates a claim bound (by spec.volumeName) to pv.
func (c *Controller) CreatePVC(ctx context.Context, ns string, v Volume) error {
	mode := corev1.PersistentVolumeFilesystem
	if v.Block {
		mode = corev1.PersistentVolumeBlock
	}
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Name: v.Claim, Namespace: ns},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			VolumeMode:  &mode,
			VolumeName:  v.PV,
			Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{
				corev1.ResourceStorage: resource.MustParse(v.Capacity),
			}},
		},
	}
	_, err := c.Kube.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{})
	return err
}

// CreateLauncherPod creates the virt-launcher pod of vmi on node, its
// compute and guest-console-log containers running.
func (c *Controller) CreateLauncherPod(ctx context.Context, ns, vmiName string, vmiUID types.UID, node string) (*corev1.Pod, error) {
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "virt-launcher-" + vmiName + "-",
			Namespace:    ns,
			Labels:       map[string]string{"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": string(vmiUID)},
		},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "compute", Image: "virt-launcher"}, {Name: SidecarContainer, Image: "virt-launcher"}},
			Volumes: []corev1.Volume{{
				Name:         "hotplug-disks",
				VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}},
			}},
		},
	}
	created, err := c.Kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		return nil, err
	}
	// Its containers run, with the IDs StartLauncher names their cgroups by.
	return c.SetComputeRestarts(ctx, created, 0)
}

// CreateAttachmentPod creates an hp-volume pod owned by the launcher that
// carries the given claims.
func (c *Controller) CreateAttachmentPod(ctx context.Context, launcher *corev1.Pod, vols []Volume) (*corev1.Pod, error) {
	yes := true
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: "hp-volume-",
			Namespace:    launcher.Namespace,
			Labels:       map[string]string{"kubevirt.io": "hotplug-disk"},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion: "v1", Kind: "Pod", Name: launcher.Name, UID: launcher.UID, Controller: &yes, BlockOwnerDeletion: &yes,
			}},
		},
		Spec: corev1.PodSpec{
			NodeName:   launcher.Spec.NodeName,
			Containers: []corev1.Container{{Name: "hotplug-disk", Image: "virt-launcher"}},
		},
	}
	for _, v := range vols {
		pod.Spec.Volumes = append(pod.Spec.Volumes, corev1.Volume{
			Name:         v.Name,
			VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: v.Claim}},
		})
	}
	return c.Kube.CoreV1().Pods(launcher.Namespace).Create(ctx, pod, metav1.CreateOptions{})
}

// VMISpec is what the simulated virt-controller writes into a VMI.
type VMISpec struct {
	Namespace, Name, Node string
	// Launcher is the active pod's UID; Attachment the hp-volume pod's UID
	// written into each hotplug volume's status.
	Launcher types.UID
	// LauncherNode is where status.activePods says the launcher runs;
	// empty means Node.
	LauncherNode string
	Attachment   map[string]types.UID // volume name -> attachment pod UID
	Volumes      []Volume
	// ActivePods, when set, is status.activePods instead of the one
	// launcher: both launchers during a migration.
	ActivePods map[types.UID]string
	// MigrationTargetNode is the kubevirt.io/migrationTargetNodeName
	// label virt-controller sets at a migration's handoff; empty for none.
	MigrationTargetNode string
	// MigrationState is status.migrationState, nil for none.
	MigrationState map[string]any
}

// Object renders the VMI as KubeVirt would have it while running.
func (s VMISpec) Object() *unstructured.Unstructured {
	var volumes, statuses []any
	for _, v := range s.Volumes {
		src := map[string]any{"claimName": v.Claim}
		if !v.NotHotpluggable {
			src["hotpluggable"] = true
		}
		volumes = append(volumes, map[string]any{"name": v.Name, "persistentVolumeClaim": src})
		mode := "Filesystem"
		if v.Block {
			mode = "Block"
		}
		mode = cmp.Or(v.Mode, mode)
		st := map[string]any{
			"name": v.Name, "target": "", "phase": "AttachedToNode",
			"persistentVolumeClaimInfo": map[string]any{
				"claimName": v.Claim, "volumeMode": mode, "filesystemOverhead": "0.055",
				"capacity": map[string]any{"storage": v.Capacity},
				"requests": map[string]any{"storage": cmp.Or(v.Requests, v.Capacity)},
			},
		}
		if uid, ok := s.Attachment[v.Name]; ok && !v.NotHotpluggable {
			st["hotplugVolume"] = map[string]any{"attachPodName": "hp-volume", "attachPodUID": string(uid)}
		}
		statuses = append(statuses, st)
	}
	labels := map[string]any{"kubevirt.io/nodeName": s.Node}
	if s.MigrationTargetNode != "" {
		labels["kubevirt.io/migrationTargetNodeName"] = s.MigrationTargetNode
	}
	active := map[string]any{string(s.Launcher): cmp.Or(s.LauncherNode, s.Node)}
	if s.ActivePods != nil {
		active = map[string]any{}
		for uid, node := range s.ActivePods {
			active[string(uid)] = node
		}
	}
	status := map[string]any{
		"nodeName":     s.Node,
		"phase":        "Running",
		"activePods":   active,
		"volumeStatus": statuses,
	}
	if s.MigrationState != nil {
		status["migrationState"] = s.MigrationState
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "kubevirt.io/v1",
		"kind":       "VirtualMachineInstance",
		"metadata": map[string]any{
			"name": s.Name, "namespace": s.Namespace,
			"labels": labels,
		},
		"spec":   map[string]any{"volumes": volumes, "domain": map[string]any{"devices": map[string]any{}}},
		"status": status,
	}}
}

// ApplyVMI creates the VMI or replaces its spec and status with s, as
// virt-controller does (the VMI has no status subresource).
func (c *Controller) ApplyVMI(ctx context.Context, s VMISpec) (*unstructured.Unstructured, error) {
	res := c.Dyn.Resource(VMIResource).Namespace(s.Namespace)
	want := s.Object()
	cur, err := res.Get(ctx, s.Name, metav1.GetOptions{})
	if err != nil {
		return res.Create(ctx, want, metav1.CreateOptions{})
	}
	cur.Object["spec"] = want.Object["spec"]
	keepVolumePhases(cur.Object, want.Object)
	cur.Object["status"] = want.Object["status"]
	cur.SetLabels(want.GetLabels())
	return res.Update(ctx, cur, metav1.UpdateOptions{})
}

// CreateVMIShell creates a VMI with no volumes yet, to learn its UID before
// its launcher pod exists.
func (c *Controller) CreateVMIShell(ctx context.Context, ns, name, node string) (*unstructured.Unstructured, error) {
	s := VMISpec{Namespace: ns, Name: name, Node: node}
	obj := s.Object()
	unstructured.RemoveNestedField(obj.Object, "status", "activePods")
	return c.Dyn.Resource(VMIResource).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{})
}

// DeleteVMI deletes the VMI.
func (c *Controller) DeleteVMI(ctx context.Context, ns, name string) error {
	return c.Dyn.Resource(VMIResource).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{})
}

// EnsureNamespace creates ns if it is missing.
func (c *Controller) EnsureNamespace(ctx context.Context, ns string) error {
	_, err := c.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	if err != nil && !isAlreadyExists(err) {
		return fmt.Errorf("create namespace %q: %w", ns, err)
	}
	return nil
}

// Mi renders a size in MiB as a quantity string.
func Mi(n int64) string { return strconv.FormatInt(n, 10) + "Mi" }

// keepVolumePhases carries the phase, reason and message of volumes that
// already have a status into the new status: virt-handler (here, the agent)
// owns them once the volume is attached.
func keepVolumePhases(cur, want map[string]any) {
	old, _, _ := unstructured.NestedSlice(cur, "status", "volumeStatus")
	next, _, _ := unstructured.NestedSlice(want, "status", "volumeStatus")
	byName := map[any]map[string]any{}
	for _, o := range old {
		if m, ok := o.(map[string]any); ok {
			byName[m["name"]] = m
		}
	}
	for _, n := range next {
		m, ok := n.(map[string]any)
		if !ok {
			continue
		}
		if prev, ok := byName[m["name"]]; ok {
			for _, k := range []string{"phase", "reason", "message"} {
				if v, ok := prev[k]; ok {
					m[k] = v
				}
			}
		}
	}
	_ = unstructured.SetNestedSlice(want, next, "status", "volumeStatus")
}
