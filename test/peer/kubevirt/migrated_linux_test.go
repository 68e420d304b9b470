// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package peer

import (
	"encoding/json"
	"strings"
	"testing"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	v1 "kubevirt.io/api/core/v1"

	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/kubevirt"
)

// TestMigratedVolumesOnTheSource measures what each mounter does on the
// source node while a hotplugged volume is volume-migrated from a
// Filesystem claim to a Block one: the launcher still has <vol>.img bound
// from the source claim, which the attachment pod here still publishes,
// while the spec and status.volumeStatus already name the destination
// claim (Block, published only on the target node). KubeVirt reads the
// source's mode from status.migratedVolumes; hpmount reads only
// status.volumeStatus.
//
//   - KubeVirt with migratedVolumes keeps the bind (Mount and Unmount
//     treat the volume as the Filesystem one it is here).
//   - KubeVirt without it (the control: why it reads the field) judges the
//     volume Block: its Mount fails looking for a block node and its
//     Unmount removes the running source's <vol>.img.
//   - hpmount judges it Block too, but removes only volumes that left the
//     spec: its engine reports the Block claim not published here
//     (kubelet.ErrNotPublished, which the agent reports as not-published)
//     and the bind stays as it was.
func TestMigratedVolumesOnTheSource(t *testing.T) {
	testutil.RequiresRoot(t)
	bin := buildHpmountSide(t)
	v := peerVolume{name: "vol", mode: kubevirt.Filesystem, fstype: "ext4"}
	for _, side := range []string{"kubevirt", "kubevirt-without-field", "hpmount"} {
		t.Run(side, func(t *testing.T) {
			n := newPeerNode(t, "mv"+side[:1]+side[len(side)-1:], []peerVolume{v})
			if side == "hpmount" {
				n.mountWithHpmount(t, bin)
			} else {
				must(t, n.mountWithKubeVirt(t))
			}
			before := n.facts(t, v)
			vmi := volumeMigrating(n, side != "kubevirt-without-field")
			switch side {
			case "hpmount":
				raw, err := json.Marshal(vmi)
				must(t, err)
				mode := decode(t, raw).Status.VolumeStatus[0].Mode()
				if mode != kubevirt.Block {
					t.Fatalf("hpmount's model reads %s, want Block from volumeStatus", mode)
				}
				n.vols = []peerVolume{{name: v.name, mode: mode, pv: "pv-destination"}}
				if out := n.mountWithHpmount(t, bin); !strings.Contains(out[v.name], "not published") {
					t.Errorf("hpmount's attach of the destination claim on the source: %q, want it not published", out[v.name])
				}
				n.vols = []peerVolume{v}
			default:
				mountErr := n.kvMounter.Mount(vmi, n.kvCgroup)
				unmountErr := n.kvMounter.Unmount(vmi, n.kvCgroup)
				t.Logf("KubeVirt's Mount: %v; Unmount: %v", mountErr, unmountErr)
				if (mountErr == nil) != (side == "kubevirt") {
					t.Errorf("KubeVirt's Mount: %v", mountErr)
				}
			}
			after := n.facts(t, v)
			t.Logf("%s: before %+v, after %+v", side, before, after)
			if kept := after == before; kept != (side != "kubevirt-without-field") {
				t.Errorf("%s: the source's bind kept: %v (before %+v, after %+v)", side, kept, before, after)
			}
		})
	}
}

// volumeMigrating is the node's VMI on the source node of a volume
// migration of every volume from its Filesystem claim to a Block claim
// "claim-dst-<vol>", with or without status.migratedVolumes.
func volumeMigrating(n *peerNode, withField bool) *v1.VirtualMachineInstance {
	vmi := n.vmi()
	vmi.Kind, vmi.APIVersion = "VirtualMachineInstance", v1.SchemeGroupVersion.String()
	vmi.Status.MigrationState = &v1.VirtualMachineInstanceMigrationState{MigrationUID: "volmig", SourceNode: nodeName,
		SourcePod: "launcher-" + n.prefix, TargetNode: "node-dst", TargetPod: "launcher-dst"}
	block, fs := k8sv1.PersistentVolumeBlock, k8sv1.PersistentVolumeFilesystem
	for i := range vmi.Spec.Volumes {
		vol := &vmi.Spec.Volumes[i]
		src, dst := vol.PersistentVolumeClaim.ClaimName, "claim-dst-"+vol.Name
		vol.PersistentVolumeClaim.ClaimName = dst
		st := &vmi.Status.VolumeStatus[i]
		st.PersistentVolumeClaimInfo = &v1.PersistentVolumeClaimInfo{ClaimName: dst, VolumeMode: &block}
		if withField {
			vmi.Status.MigratedVolumes = append(vmi.Status.MigratedVolumes, v1.StorageMigratedVolumeInfo{VolumeName: vol.Name,
				SourcePVCInfo:      &v1.PersistentVolumeClaimInfo{ClaimName: src, VolumeMode: &fs},
				DestinationPVCInfo: &v1.PersistentVolumeClaimInfo{ClaimName: dst, VolumeMode: &block}})
		}
	}
	return vmi
}

// TestMigratedVolumesOnTheTarget measures the target node of the same
// volume migration at the moment status.volumeStatus still names the
// source claim (Filesystem), as KubeVirt's migration-target controller
// allows for when it replaces those entries from status.migratedVolumes:
// the target attachment pod publishes the destination claim, a Block one.
// KubeVirt takes the destination's mode from migratedVolumes and makes the
// block node at once. hpmount, judging by volumeStatus, looks for a
// Filesystem publish that is not there, reports it not published and
// makes nothing; once volumeStatus names the destination's Block mode it
// makes the node.
func TestMigratedVolumesOnTheTarget(t *testing.T) {
	testutil.RequiresRoot(t)
	bin := buildHpmountSide(t)
	v := peerVolume{name: "vol", mode: kubevirt.Block}
	kv := newPeerNode(t, "mtk", []peerVolume{v})
	must(t, kv.kubeVirtMounter(t).MountFromPod(volumeMigrationTarget(kv), kv.attach, kv.kvCgroup))
	if f := kv.facts(t, v); f.Kind != "block node" || !f.RdevSame {
		t.Errorf("KubeVirt on the target: %+v, want the destination's block node", f)
	}

	hp := newPeerNode(t, "mth", []peerVolume{v})
	raw, err := json.Marshal(volumeMigrationTarget(hp))
	must(t, err)
	mode := decode(t, raw).Status.VolumeStatus[0].Mode()
	hp.vols = []peerVolume{{name: v.name, mode: mode}}
	if out := hp.mountWithHpmount(t, bin); mode != kubevirt.Filesystem || !strings.Contains(out[v.name], "not published") {
		t.Errorf("hpmount judged %s and reported %q, want Filesystem not published", mode, out[v.name])
	}
	hp.vols = []peerVolume{v}
	if f := hp.facts(t, v); f.Target != "missing" {
		t.Errorf("hpmount made %+v before volumeStatus named the destination", f)
	}
	if out := hp.mountWithHpmount(t, bin); out[v.name] != "created" {
		t.Errorf("hpmount once volumeStatus names Block: %q, want created", out[v.name])
	}
}

// volumeMigrationTarget is the node's VMI on the target node of a volume
// migration of its volumes from Filesystem claims to the Block claims the
// node publishes, volumeStatus still naming the source claims.
func volumeMigrationTarget(n *peerNode) *v1.VirtualMachineInstance {
	vmi := n.vmi()
	vmi.Kind, vmi.APIVersion = "VirtualMachineInstance", v1.SchemeGroupVersion.String()
	vmi.Status.ActivePods[types.UID("source-launcher")] = "node-src"
	vmi.Status.MigrationState = &v1.VirtualMachineInstanceMigrationState{MigrationUID: "volmig", SourceNode: "node-src",
		SourcePod: "launcher-src", TargetNode: nodeName, TargetPod: "launcher-" + n.prefix, TargetAttachmentPodUID: n.attach}
	block, fs := k8sv1.PersistentVolumeBlock, k8sv1.PersistentVolumeFilesystem
	for i := range vmi.Spec.Volumes {
		vol := &vmi.Spec.Volumes[i]
		dst, src := vol.PersistentVolumeClaim.ClaimName, "claim-src-"+vol.Name
		vmi.Status.VolumeStatus[i].PersistentVolumeClaimInfo = &v1.PersistentVolumeClaimInfo{ClaimName: src, VolumeMode: &fs}
		vmi.Status.MigratedVolumes = append(vmi.Status.MigratedVolumes, v1.StorageMigratedVolumeInfo{VolumeName: vol.Name,
			SourcePVCInfo:      &v1.PersistentVolumeClaimInfo{ClaimName: src, VolumeMode: &fs},
			DestinationPVCInfo: &v1.PersistentVolumeClaimInfo{ClaimName: dst, VolumeMode: &block}})
	}
	return vmi
}
