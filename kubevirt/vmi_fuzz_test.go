// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package kubevirt_test

import (
	"encoding/json"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/kubevirt"
	kt "github.com/hpmount/hpmount/kubevirt/kubevirttest"
)

// vmiSeeds are fixture VMIs as the API serves them, one per shape the
// judge tells apart, written as JSON.
func vmiSeeds(f *testing.F) {
	for _, vols := range [][]kt.Vol{
		{{Name: "disk1", Claim: "c1", AttachUID: kt.AttachUID}},
		{{Name: "disk1", Claim: "c1", AttachUID: kt.AttachUID, Mode: "Block", Capacity: "2Gi"}},
		{{Name: "dump", Claim: "c2", AttachUID: kt.AttachUID, MemoryDump: true}, {Name: "u", Claim: "c3", Utility: true, AttachUID: kt.AttachUID}},
		{{Name: "x", Claim: "c1", AttachUID: kt.AttachUID}, {Name: "x.img", Claim: "c2", AttachUID: kt.AttachUID, Mode: "Block"}},
		{{Name: "../../etc", Claim: "c1", AttachUID: kt.OtherPodUID}, {Name: "d", Claim: "c", DataVolume: true, NoStatus: true}},
		{{Name: "disk1", Claim: "other-claim", AttachUID: "no-such-pod", Mode: "Sideways"}},
	} {
		data, err := json.Marshal(kt.VMIObject(vols...).Object)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(data)
	}
	f.Add([]byte(`{"spec":{"volumes":[{"name":"a","persistentVolumeClaim":{"claimName":7}}]}}`))
	f.Add([]byte(`{"status":{"volumeStatus":[{"name":"a","persistentVolumeClaimInfo":{"capacity":{"storage":"1e999Ei"}}}]}}`))
}

// FuzzDecodeVMI feeds any JSON object to DecodeVMI and what it accepts to
// the judges the agent and diag run (ChooseLauncher, HotplugVolumes,
// MigrationOf). None may panic, and DecodeVMI's error is the converter's
// (it wraps one), never a recovered panic. The judgement must hold:
// one verdict per hotpluggable volume; every volume not refused has a safe
// name, a known mode, the claim its spec names (never its name when the
// spec names another), an attachment pod only when that pod is verified to
// be the launcher's; and no two volumes not refused share an entry in
// hotplug-disks.
func FuzzDecodeVMI(f *testing.F) {
	vmiSeeds(f)
	launcher := kt.Launcher()
	stranger := kt.AttachmentPod(func(p *corev1.Pod) { p.UID = kt.OtherPodUID; p.OwnerReferences = nil })
	pods := kubevirt.PodMap{kt.LauncherUID: launcher, kt.AttachUID: kt.AttachmentPod(), kt.OtherPodUID: stranger}
	f.Fuzz(func(t *testing.T, data []byte) {
		var obj map[string]any
		if json.Unmarshal(data, &obj) != nil || obj == nil {
			return
		}
		vmi, err := kubevirt.DecodeVMI(&unstructured.Unstructured{Object: obj})
		if err != nil {
			if errors.Unwrap(err) == nil {
				t.Fatalf("DecodeVMI failed without a converter error (a recovered panic?): %v", err)
			}
			return
		}
		_ = kubevirt.MigrationOf(vmi, kt.Node)
		_ = kubevirt.ChooseLauncher(vmi, kt.Node, pods)
		checkJudgement(t, vmi, kubevirt.HotplugVolumes(vmi, launcher, pods))
	})
}

func checkJudgement(t *testing.T, vmi *kubevirt.VMI, vols []kubevirt.HotplugVolume) {
	t.Helper()
	specClaims := map[string][]string{}
	want := len(vmi.Spec.UtilityVolumes)
	for _, v := range vmi.Spec.Volumes {
		if claim, ok := v.Hotpluggable(); ok {
			want++
			specClaims[v.Name] = append(specClaims[v.Name], claim)
		}
	}
	for _, u := range vmi.Spec.UtilityVolumes {
		specClaims[u.Name] = append(specClaims[u.Name], u.ClaimName)
	}
	if len(vols) != want {
		t.Fatalf("%d verdicts for %d hotpluggable volumes", len(vols), want)
	}
	entries := map[string]string{}
	for _, hv := range vols {
		if hv.Refused != nil {
			if hv.Refused.Reason == "" {
				t.Fatalf("volume %q refused without a reason: %+v", hv.Name, hv.Refused)
			}
			continue
		}
		if err := kubelet.ValidName(hv.Name); err != nil {
			t.Fatalf("volume %q not refused: %v", hv.Name, err)
		}
		entry := hv.Name
		switch hv.Mode {
		case kubevirt.Filesystem:
			entry = kubelet.TargetName(hv.Name)
		case kubevirt.Block, kubevirt.Directory:
		default:
			t.Fatalf("volume %q not refused with mode %q", hv.Name, hv.Mode)
		}
		if other, ok := entries[entry]; ok {
			t.Fatalf("volumes %q and %q both use %q in hotplug-disks", other, hv.Name, entry)
		}
		entries[entry] = hv.Name
		if claims := specClaims[hv.Name]; len(claims) == 1 && claims[0] != "" && hv.Claim != claims[0] {
			t.Fatalf("volume %q: claim %q, the spec names %q", hv.Name, hv.Claim, claims[0])
		}
		if hv.AttachPod != nil && (hv.AttachPod.UID != hv.AttachPodUID || kubevirt.CheckAttachmentPod(kt.Launcher(), hv.AttachPod) != nil) {
			t.Fatalf("volume %q uses attachment pod %s, not verified", hv.Name, hv.AttachPod.UID)
		}
		if hv.AttachPod == nil && hv.Pending == "" {
			t.Fatalf("volume %q neither refused, pending nor attached: %+v", hv.Name, hv)
		}
		if hv.AttachPodUID == types.UID("") && hv.AttachPod != nil {
			t.Fatalf("volume %q: attachment pod without a UID", hv.Name)
		}
	}
}

// TestDuplicateNamesRefused: what FuzzDecodeVMI found. Two volumes of one
// name (in spec.volumes or spec.utilityVolumes; the API server accepts it
// when KubeVirt's webhook is bypassed) would have the agent bind one claim,
// then the other, onto the same target: both are refused, and a volume of
// another name is still judged.
func TestDuplicateNamesRefused(t *testing.T) {
	for _, tc := range []struct {
		name string
		vols []kt.Vol
	}{
		{"spec volumes", []kt.Vol{{Name: "d", Claim: "c1", AttachUID: kt.AttachUID}, {Name: "d", Claim: "c2", AttachUID: kt.AttachUID}}},
		{"utility volumes", []kt.Vol{{Name: "u", Claim: "c1", Utility: true, AttachUID: kt.AttachUID}, {Name: "u", Claim: "c2", Utility: true, AttachUID: kt.AttachUID}}},
		{"block twice", []kt.Vol{{Name: "b", Claim: "c1", Mode: "Block", AttachUID: kt.AttachUID}, {Name: "b", Claim: "c2", Mode: "Block", AttachUID: kt.AttachUID}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			vols := append(tc.vols, kt.Vol{Name: "ok", Claim: "c3", AttachUID: kt.AttachUID})
			pods := kubevirt.PodMap{kt.LauncherUID: kt.Launcher(), kt.AttachUID: kt.AttachmentPod()}
			got := kubevirt.HotplugVolumes(kt.Decode(kt.VMIObject(vols...)), kt.Launcher(), pods)
			for _, hv := range got {
				refused := hv.Refused != nil && hv.Refused.Reason == kubevirt.RefusedUnsafeName
				if refused != (hv.Name != "ok") {
					t.Errorf("volume %q (claim %q): refused %+v", hv.Name, hv.Claim, hv.Refused)
				}
			}
		})
	}
}
