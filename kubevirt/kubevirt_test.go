// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package kubevirt_test

import (
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/hpmount/hpmount/kubevirt"
	kt "github.com/hpmount/hpmount/kubevirt/kubevirttest"
)

func TestDecodeVMI(t *testing.T) {
	good := kt.VMIObject(kt.Vol{Name: "disk1", Claim: "c1", AttachUID: kt.AttachUID, Mode: "Block", Capacity: "2Gi"})
	tests := []struct {
		name    string
		mutate  func(u *unstructured.Unstructured)
		wantErr string
	}{
		{name: "valid"},
		{name: "volumes not a list", mutate: func(u *unstructured.Unstructured) {
			u.Object["spec"] = map[string]any{"volumes": "nope"}
		}, wantErr: "decode vmi"},
		{name: "bad quantity", mutate: func(u *unstructured.Unstructured) {
			st := u.Object["status"].(map[string]any)["volumeStatus"].([]any)[0].(map[string]any)
			st["persistentVolumeClaimInfo"].(map[string]any)["capacity"] = map[string]any{"storage": "ten gigs"}
		}, wantErr: "decode vmi"},
		{name: "activePods not a map", mutate: func(u *unstructured.Unstructured) {
			u.Object["status"].(map[string]any)["activePods"] = []any{1, 2}
		}, wantErr: "decode vmi"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := good.DeepCopy()
			if tt.mutate != nil {
				tt.mutate(u)
			}
			v, err := kubevirt.DecodeVMI(u)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want containing %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			st := v.Status.VolumeStatusByName("disk1")
			if st == nil || st.HotplugVolume.AttachPodUID != kt.AttachUID {
				t.Fatalf("status = %+v", st)
			}
			info := st.PersistentVolumeClaimInfo
			if info.Mode() != kubevirt.Block || info.CapacityBytes() != 2<<30 {
				t.Fatalf("mode %q capacity %d", info.Mode(), info.CapacityBytes())
			}
			if oh, err := info.Overhead(); err != nil || oh != 0.055 {
				t.Fatalf("overhead %v %v", oh, err)
			}
			if v.Status.ActivePods[kt.LauncherUID] != kt.Node {
				t.Fatalf("activePods = %v", v.Status.ActivePods)
			}
		})
	}
	if _, err := kubevirt.DecodeVMI(nil); err == nil {
		t.Fatal("nil object decoded")
	}
}

func TestAttachmentPodRefusals(t *testing.T) {
	tests := []struct {
		name   string
		pod    *corev1.Pod
		reason string
	}{
		{"owned by another launcher", kt.AttachmentPod(func(p *corev1.Pod) { p.OwnerReferences[0].UID = kt.OtherPodUID }), kubevirt.RefusedAttachOwner},
		{"owner is not controller", kt.AttachmentPod(func(p *corev1.Pod) { p.OwnerReferences[0].Controller = nil }), kubevirt.RefusedAttachOwner},
		{"wrong label", kt.AttachmentPod(func(p *corev1.Pod) { p.Labels[kubevirt.LabelApp] = kubevirt.AppVirtLauncher }), kubevirt.RefusedAttachLabel},
		{"other namespace", kt.AttachmentPod(func(p *corev1.Pod) { p.Namespace = "tenant-b" }), kubevirt.RefusedAttachNamespace},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pods := kubevirt.PodMap{kt.LauncherUID: kt.Launcher(), kt.AttachUID: tt.pod}
			vmi := kt.Decode(kt.VMIObject(kt.Vol{Name: "hp", Claim: "c1", AttachUID: kt.AttachUID}))
			vols := kubevirt.HotplugVolumes(vmi, pods[kt.LauncherUID], pods)
			if len(vols) != 1 || vols[0].Refused == nil || vols[0].Refused.Reason != tt.reason {
				t.Fatalf("volumes = %+v, want refusal %q", vols, tt.reason)
			}
			if vols[0].AttachPod != nil {
				t.Fatal("refused attachment pod was verified")
			}
		})
	}
}

func TestLauncherRefusals(t *testing.T) {
	tests := []struct {
		name   string
		pod    *corev1.Pod
		reason string // "" means found
	}{
		{"valid", kt.Launcher(), ""},
		{"on another node", kt.Launcher(func(p *corev1.Pod) { p.Spec.NodeName = "node2" }), kubevirt.RefusedLauncherNode},
		{"no hotplug-disks emptyDir", kt.Launcher(func(p *corev1.Pod) { p.Spec.Volumes = nil }), kubevirt.RefusedLauncherNoHotplug},
		{"hotplug-disks is a hostPath", kt.Launcher(func(p *corev1.Pod) {
			p.Spec.Volumes[0].VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}
		}), kubevirt.RefusedLauncherNoHotplug},
		{"created by another VMI", kt.Launcher(func(p *corev1.Pod) { p.Labels[kubevirt.LabelCreatedBy] = "other-vmi" }), kubevirt.RefusedLauncherLabels},
		{"not a launcher", kt.Launcher(func(p *corev1.Pod) { p.Labels[kubevirt.LabelApp] = kubevirt.AppHotplugDisk }), kubevirt.RefusedLauncherLabels},
		{"other namespace", kt.Launcher(func(p *corev1.Pod) { p.Namespace = "tenant-b" }), kubevirt.RefusedLauncherNamespace},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmi := kt.Decode(kt.VMIObject(kt.Vol{Name: "hp", Claim: "c1", AttachUID: kt.AttachUID}))
			l, r := kubevirt.FindLauncher(vmi, kt.Node, kubevirt.PodMap{kt.LauncherUID: tt.pod})
			if tt.reason == "" {
				if r != nil || l == nil {
					t.Fatalf("launcher %v refusal %v", l, r)
				}
				return
			}
			if l != nil || r == nil || r.Reason != tt.reason {
				t.Fatalf("launcher %v refusal %v, want refusal %q", l, r, tt.reason)
			}
		})
	}
	t.Run("VMI for this node whose launchers all run elsewhere is refused", func(t *testing.T) {
		u := kt.VMIObject()
		u.Object["status"].(map[string]any)["activePods"] = map[string]any{string(kt.LauncherUID): "node2"}
		l, r := kubevirt.FindLauncher(kt.Decode(u), kt.Node, kubevirt.PodMap{kt.LauncherUID: kt.Launcher()})
		if l != nil || r == nil || r.Reason != kubevirt.RefusedLauncherNode || !strings.Contains(r.Message, "node2") {
			t.Fatalf("launcher %v refusal %v, want a launcher-node refusal naming node2", l, r)
		}
	})
}

func TestCheckVolumeName(t *testing.T) {
	tests := []struct {
		name string
		ok   bool
	}{
		{"disk1", true},
		{"my-disk.v2", true},
		{strings.Repeat("a", 200), true},
		{strings.Repeat("a", 201), false},
		{"", false},
		{".", false},
		{"..", false},
		{"../etc", false},
		{"a/b", false},
		{"a\x00b", false},
	}
	for _, tt := range tests {
		t.Run(strings.ToValidUTF8(tt.name[:min(len(tt.name), 20)], "?"), func(t *testing.T) {
			r := kubevirt.CheckVolumeName(tt.name)
			if (r == nil) != tt.ok {
				t.Fatalf("CheckVolumeName(%q) = %v, want ok=%v", tt.name, r, tt.ok)
			}
			if r != nil && r.Reason != kubevirt.RefusedUnsafeName {
				t.Fatalf("refusal %v is not an unsafe-name refusal", r)
			}
		})
	}
	t.Run("unsafe name in vmi is refused", func(t *testing.T) {
		pods := kubevirt.PodMap{kt.LauncherUID: kt.Launcher(), kt.AttachUID: kt.AttachmentPod()}
		vmi := kt.Decode(kt.VMIObject(kt.Vol{Name: "..", Claim: "c1", AttachUID: kt.AttachUID}))
		vols := kubevirt.HotplugVolumes(vmi, pods[kt.LauncherUID], pods)
		if len(vols) != 1 || vols[0].Refused == nil || vols[0].Refused.Reason != kubevirt.RefusedUnsafeName || vols[0].AttachPod != nil {
			t.Fatalf("volumes = %+v", vols)
		}
	})
}

func TestDirectoryVolumes(t *testing.T) {
	pods := kubevirt.PodMap{kt.LauncherUID: kt.Launcher(), kt.AttachUID: kt.AttachmentPod()}
	tests := []struct {
		name     string
		vols     []kt.Vol
		wantMode kubevirt.VolumeMode
		reason   string // refusal of the last volume, "" for none
	}{
		{"memory dump", []kt.Vol{{Name: "dump", Claim: "c1", AttachUID: kt.AttachUID, MemoryDump: true}}, kubevirt.Directory, ""},
		{"utility volume", []kt.Vol{{Name: "backup", Claim: "c1", AttachUID: kt.AttachUID, Utility: true}}, kubevirt.Directory, ""},
		{"status memoryDumpVolume alone decides, as in virt-handler", []kt.Vol{{Name: "dump", Claim: "c1", AttachUID: kt.AttachUID}}, kubevirt.Directory, ""},
		{"block memory dump is refused", []kt.Vol{{Name: "dump", Claim: "c1", AttachUID: kt.AttachUID, MemoryDump: true, Mode: "Block"}}, kubevirt.Filesystem, kubevirt.RefusedUnknownMode},
		{"utility volume named like a regular one is refused", []kt.Vol{{Name: "x", Claim: "c0", AttachUID: kt.AttachUID}, {Name: "x", Claim: "c1", AttachUID: kt.AttachUID, Utility: true, NoStatus: true}}, kubevirt.Directory, kubevirt.RefusedUnsafeName},
		{"block volume x.img beside filesystem volume x is refused", []kt.Vol{{Name: "x", Claim: "c0", AttachUID: kt.AttachUID}, {Name: "x.img", Claim: "c1", AttachUID: kt.AttachUID, Mode: "Block"}}, kubevirt.Block, kubevirt.RefusedUnsafeName},
		{"utility volume x.img beside filesystem volume x is refused", []kt.Vol{{Name: "x", Claim: "c0", AttachUID: kt.AttachUID}, {Name: "x.img", Claim: "c1", AttachUID: kt.AttachUID, Utility: true}}, kubevirt.Directory, kubevirt.RefusedUnsafeName},
		{"unsafe utility volume name", []kt.Vol{{Name: "..", Claim: "c1", AttachUID: kt.AttachUID, Utility: true}}, kubevirt.Filesystem, kubevirt.RefusedUnsafeName},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := kt.VMIObject(tt.vols...)
			if tt.name == "status memoryDumpVolume alone decides, as in virt-handler" {
				st := u.Object["status"].(map[string]any)["volumeStatus"].([]any)[0].(map[string]any)
				st["memoryDumpVolume"] = map[string]any{"claimName": "c1"}
			}
			vmi := kt.Decode(u)
			vols := kubevirt.HotplugVolumes(vmi, pods[kt.LauncherUID], pods)
			if len(vols) != len(tt.vols) {
				t.Fatalf("%d volumes, want %d", len(vols), len(tt.vols))
			}
			last := vols[len(vols)-1]
			if tt.reason != "" {
				if last.Refused == nil || last.Refused.Reason != tt.reason {
					t.Fatalf("volume %+v, want refusal %q", last, tt.reason)
				}
				return
			}
			if last.Refused != nil || last.Mode != tt.wantMode || last.AttachPod == nil || last.Claim != "c1" {
				t.Fatalf("volume %+v (refused %v), want attachable %s of c1", last, last.Refused, tt.wantMode)
			}
			if !vmi.Spec.HasVolume(last.Name) || len(vmi.Spec.HotplugVolumeNames()) != 1 {
				t.Fatalf("spec does not name %q: %v", last.Name, vmi.Spec.HotplugVolumeNames())
			}
		})
	}
}

// TestKeeps: a volume is kept while the spec names it or the domain still
// holds its disk (the status entry of a hotplug volume names a target).
func TestKeeps(t *testing.T) {
	vmi := &kubevirt.VMI{
		Spec: kubevirt.VMISpec{Volumes: []kubevirt.Volume{{Name: "a", PersistentVolumeClaim: &kubevirt.PVCVolumeSource{ClaimName: "ca", Hotpluggable: true}}},
			UtilityVolumes: []kubevirt.UtilityVolume{{Name: "dump", ClaimName: "cd"}}},
		Status: kubevirt.VMIStatus{VolumeStatus: []kubevirt.VolumeStatus{
			{Name: "a", Target: "sda", HotplugVolume: &kubevirt.HotplugVolumeStatus{}},
			{Name: "held", Target: "sdb", HotplugVolume: &kubevirt.HotplugVolumeStatus{}},
			{Name: "let-go", Phase: "UnMountedFromPod", HotplugVolume: &kubevirt.HotplugVolumeStatus{}},
			{Name: "boot", Target: "vda"},
		}},
	}
	for _, tc := range []struct {
		name string
		want bool
	}{{"a", true}, {"dump", true}, {"held", true}, {"let-go", false}, {"boot", false}, {"gone", false}} {
		if got := vmi.Keeps(tc.name); got != tc.want {
			t.Errorf("Keeps(%q) = %v, want %v", tc.name, got, tc.want)
		}
	}
	if got, want := vmi.KeptVolumeNames(), []string{"a", "dump", "held"}; !slices.Equal(got, want) {
		t.Errorf("KeptVolumeNames() = %q, want %q", got, want)
	}
}
