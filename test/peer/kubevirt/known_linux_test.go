// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package peer

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/kubevirt/pkg/unsafepath"
	"kubevirt.io/kubevirt/pkg/virt-handler/isolation"

	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/kubevirt"
)

// TestKnown16520TwoAttachmentPods reproduces kubevirt#16520 with KubeVirt
// v1.7.0's own code, in the moment an attachment pod is replaced: the old
// pod (A) still publishes fs-a, the new one (B) publishes fs-a and the new
// volume fs-b, and the VMI's status names A for fs-a and B for fs-b.
//
//   - mountFromPod takes the first volume's attachment pod for every later
//     one (the sourceUID that kubevirt#18105 scopes per volume): KubeVirt
//     looks for fs-b in pod A, does not find it, eats the error and leaves
//     an empty, unmounted fs-b.img; its Mount reports success. hpmount
//     takes each volume from the pod its status names and mounts both.
//   - The node's parent mount of fs-a as pod B sees it is chosen among
//     both pods' publish directories (same device, same root) by the
//     longest root, a tie: KubeVirt resolves it to pod A's. For a CSI
//     volume both are one filesystem, so the launcher gets the same file;
//     hpmount never searches for a parent, it opens the named pod's
//     publish path.
func TestKnown16520TwoAttachmentPods(t *testing.T) {
	testutil.RequiresRoot(t)
	bin := buildHpmountSide(t)
	vols := []peerVolume{
		{name: "fs-a", mode: kubevirt.Filesystem, fstype: "ext4", alsoIn: "new"},
		{name: "fs-b", mode: kubevirt.Filesystem, fstype: "ext4", pod: "new"},
	}
	kv := newPeerNode(t, "k16520", vols)
	if err := kv.mountWithKubeVirt(t); err != nil {
		t.Fatalf("KubeVirt's Mount: %v, want it to report success", err)
	}
	want := map[string]string{"fs-a": "file bind", "fs-b": "file"}
	for _, v := range vols {
		if f := kv.facts(t, v); f.Kind != want[v.name] {
			t.Errorf("KubeVirt left %s as %+v, want kind %q", v.name, f, want[v.name])
		}
	}
	podB := kv.attachPods[kv.podUID("new")]
	parent, err := isolation.ParentPathForMount(isolation.NodeIsolationResult(),
		isolation.NewIsolationResult(podB.pid(), 0), "", "/fs-a")
	must(t, err)
	got := unsafepath.UnsafeAbsolute(parent.Raw())
	if !strings.Contains(got, "/"+string(kv.attach)+"/") {
		t.Errorf("KubeVirt resolved pod B's fs-a to %q, want pod A's (%s) as kubevirt#16520 says", got, kv.attach)
	}
	t.Logf("KubeVirt resolves pod B's fs-a to %s", got)

	hp := newPeerNode(t, "h16520", vols)
	outcomes := hp.mountWithHpmount(t, bin)
	for _, v := range vols {
		if f := hp.facts(t, v); outcomes[v.name] != "mounted" || f.Kind != "file bind" || !f.SourceSame {
			t.Errorf("hpmount: %s %s, %+v; want mounted from its own pod", v.name, outcomes[v.name], f)
		}
	}
}

// TestKnown16532RecordGrows reproduces kubevirt#16532 with KubeVirt
// v1.7.0's mounter: every Mount that fails after it found the source (here
// a claim whose disk.img is not there yet) appends the target to the VMI's
// record file again. Once the volume is mounted and then unplugged,
// Unmount unmounts it at the first entry and fails at the second, whose
// target it just removed, on every later call: the record never shrinks.
// hpmount keeps no record (mountinfo is its only one): the same attempts
// change nothing, and one detach removes the volume.
func TestKnown16532RecordGrows(t *testing.T) {
	testutil.RequiresRoot(t)
	bin := buildHpmountSide(t)
	const retries = 3
	v := peerVolume{name: "fs", mode: kubevirt.Filesystem, fstype: "ext4", noDiskImg: true}
	for _, side := range []string{"kubevirt", "hpmount"} {
		t.Run(side, func(t *testing.T) {
			n := newPeerNode(t, "r16532"+side[:1], []peerVolume{v})
			for range retries {
				if side == "kubevirt" {
					if err := n.mountWithKubeVirt(t); err == nil {
						t.Fatal("KubeVirt's Mount without disk.img succeeded")
					}
				} else if out := n.mountWithHpmount(t, bin); out[v.name] == "mounted" {
					t.Fatal("hpmount mounted a claim without disk.img")
				}
			}
			must(t, os.WriteFile(filepath.Join(n.mountDir(v), "disk.img"), make([]byte, 1<<20), 0o660))
			if side == "hpmount" {
				if out := n.mountWithHpmount(t, bin); out[v.name] != "mounted" {
					t.Fatalf("hpmount once disk.img is there: %s", out[v.name])
				}
				if out := n.runHpmount(t, bin, "detach"); out[v.name] != "removed" {
					t.Errorf("hpmount's detach after the unplug: %q, want removed", out[v.name])
				}
				if f := n.facts(t, v); f.Target != "missing" {
					t.Errorf("hpmount left %+v after the unplug", f)
				}
				return
			}
			must(t, n.mountWithKubeVirt(t))
			if got := n.recordEntries(t); got != retries+1 {
				t.Errorf("KubeVirt's record holds %d entries for one target, want %d (kubevirt#16532)", got, retries+1)
			}
			unplugged := n.vmi()
			unplugged.Spec.Volumes, unplugged.Status.VolumeStatus = nil, nil
			for i := range 2 {
				err := n.kvMounter.Unmount(unplugged, n.kvCgroup)
				t.Logf("KubeVirt's Unmount %d after the unplug: %v", i+1, err)
				if err == nil {
					t.Errorf("KubeVirt's Unmount %d succeeded; kubevirt#16532's duplicates make it fail", i+1)
				}
			}
			if f := n.facts(t, v); f.Target != "missing" {
				t.Errorf("KubeVirt left %+v after the unplug", f)
			}
			if got := n.recordEntries(t); got != retries+1 {
				t.Errorf("KubeVirt's record holds %d entries after the unplug, want it stuck at %d", got, retries+1)
			}
		})
	}
}

// recordEntries counts the target entries in KubeVirt's record file of
// the node's VMI.
func (n *peerNode) recordEntries(t *testing.T) int {
	t.Helper()
	raw, err := os.ReadFile(filepath.Join(n.kvState, string(n.vmi().UID)))
	must(t, err)
	var rec struct {
		Data struct {
			MountTargetEntries []struct{ TargetFile string } `json:"mountTargetEntries"`
		} `json:"data"`
		MountTargetEntries []struct{ TargetFile string } `json:"mountTargetEntries"`
	}
	must(t, json.Unmarshal(raw, &rec))
	t.Logf("KubeVirt's record file: %d bytes: %s", len(raw), raw)
	return len(rec.MountTargetEntries) + len(rec.Data.MountTargetEntries)
}

// TestKnown17882FailedMigrationTarget reproduces kubevirt#17882 with
// KubeVirt v1.7.0's mounter on the target node of a migration: it mounts
// from the target attachment pod (MountFromPod, as its migration-target
// controller does), the migration fails, and the cleanup it runs then
// (Unmount, which keeps every volume still in the spec) leaves the bind
// in the target launcher. hpmount's ownership rules abandon that launcher
// (kubevirt.ChooseLauncher) and its engine detaches what is there.
func TestKnown17882FailedMigrationTarget(t *testing.T) {
	testutil.RequiresRoot(t)
	bin := buildHpmountSide(t)
	v := peerVolume{name: "fs", mode: kubevirt.Filesystem, fstype: "ext4"}
	for _, side := range []string{"kubevirt", "hpmount"} {
		t.Run(side, func(t *testing.T) {
			n := newPeerNode(t, "m17882"+side[:1], []peerVolume{v})
			if side == "hpmount" {
				n.mountWithHpmount(t, bin)
				failed := migrationTarget(n, true)
				raw, err := json.Marshal(failed)
				must(t, err)
				c := kubevirt.ChooseLauncher(decode(t, raw), nodeName, kubevirt.PodMap{n.launcher: n.launcherObject(failed)})
				if c.Launcher != nil || len(c.Abandoned) != 1 || c.Abandoned[0].UID != n.launcher {
					t.Fatalf("hpmount's choice after the failed migration: %+v, want the target launcher abandoned", c)
				}
				if out := n.runHpmount(t, bin, "detach"); out[v.name] != "removed" {
					t.Errorf("hpmount's detach from the abandoned launcher: %q", out[v.name])
				}
				if f := n.facts(t, v); f.Target != "missing" {
					t.Errorf("hpmount left %+v in the abandoned target launcher", f)
				}
				return
			}
			running := migrationTarget(n, false)
			must(t, n.kubeVirtMounter(t).MountFromPod(running, n.attach, n.kvCgroup))
			if f := n.facts(t, v); f.Mounts != 1 {
				t.Fatalf("KubeVirt's MountFromPod on the migration target left %+v", f)
			}
			must(t, n.kvMounter.Unmount(migrationTarget(n, true), n.kvCgroup))
			if f := n.facts(t, v); f.Mounts != 1 {
				t.Errorf("after the failed migration's cleanup KubeVirt left %+v, want the bind leaked (kubevirt#17882)", f)
			}
			must(t, n.unmountAllWithKubeVirt(t))
			if f := n.facts(t, v); f.Mounts != 0 {
				t.Errorf("KubeVirt's UnmountAll (kubevirt#17883's cleanup) left %+v", f)
			}
		})
	}
}

// migrationTarget is the node's VMI as the target node of a migration
// sees it: the source launcher and attachment pod on another node, the
// target launcher and attachment pod here; failed or still running.
func migrationTarget(n *peerNode, failed bool) *v1.VirtualMachineInstance {
	vmi := n.vmi()
	vmi.Kind, vmi.APIVersion = "VirtualMachineInstance", v1.SchemeGroupVersion.String()
	vmi.Status.ActivePods = map[types.UID]string{"source-launcher": "node-src", n.launcher: nodeName}
	vmi.Status.NodeName = "node-src"
	for i := range vmi.Status.VolumeStatus {
		vmi.Status.VolumeStatus[i].HotplugVolume.AttachPodUID = "source-attach"
	}
	vmi.Status.MigrationState = &v1.VirtualMachineInstanceMigrationState{MigrationUID: "mig-" + types.UID(n.prefix),
		SourceNode: "node-src", SourcePod: "launcher-src", TargetNode: nodeName, TargetPod: "launcher-" + n.prefix,
		TargetAttachmentPodUID: n.attach, Completed: failed, Failed: failed}
	return vmi
}

// launcherObject is the node's launcher as the API server shows it.
func (n *peerNode) launcherObject(vmi *v1.VirtualMachineInstance) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "launcher-" + n.prefix, Namespace: vmi.Namespace, UID: n.launcher,
			Labels: map[string]string{kubevirt.LabelApp: kubevirt.AppVirtLauncher, kubevirt.LabelCreatedBy: string(vmi.UID)}},
		Spec: corev1.PodSpec{NodeName: nodeName, Volumes: []corev1.Volume{{Name: kubelet.HotplugDisksVolume,
			VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
}
