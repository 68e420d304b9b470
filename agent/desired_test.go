package agent

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

type mapPods map[types.UID]*corev1.Pod

func (m mapPods) PodByUID(uid types.UID) (*corev1.Pod, bool) {
	p, ok := m[uid]
	return p, ok
}

var _ podLookup = mapPods(nil)

func staticPV(_ context.Context, _, claim string) (string, error) { return "pv-" + claim, nil }

func mustDecode(t *testing.T, u *unstructured.Unstructured) *VMI {
	t.Helper()
	v, err := DecodeVMI(u)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	return v
}

func TestDecodeVMI(t *testing.T) {
	good := vmiObject(vol{name: "disk1", claim: "c1", attachUID: attachUID, mode: "Block", capacity: "2Gi"})
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
			v, err := DecodeVMI(u)
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
			if st == nil || st.HotplugVolume.AttachPodUID != attachUID {
				t.Fatalf("status = %+v", st)
			}
			info := st.PersistentVolumeClaimInfo
			if info.Mode() != Block || info.CapacityBytes() != 2<<30 {
				t.Fatalf("mode %q capacity %d", info.Mode(), info.CapacityBytes())
			}
			if oh, err := info.Overhead(); err != nil || oh != 0.055 {
				t.Fatalf("overhead %v %v", oh, err)
			}
			if v.Status.ActivePods[launcherUID] != testNode {
				t.Fatalf("activePods = %v", v.Status.ActivePods)
			}
		})
	}
	if _, err := DecodeVMI(nil); err == nil {
		t.Fatal("nil object decoded")
	}
}

func TestBuildIntents(t *testing.T) {
	pods := mapPods{launcherUID: launcherPod(), attachUID: attachmentPod()}
	tests := []struct {
		name       string
		vols       []vol
		want       map[string]VolumeMode // attachable volumes and their mode
		pending    []string
		claimOfVol map[string]string
	}{
		{
			name: "hotpluggable pvc, non-hotpluggable ignored",
			vols: []vol{{name: "hp", claim: "c1", attachUID: attachUID}, {name: "root", claim: "rootc", notHotplug: true, attachUID: attachUID}},
			want: map[string]VolumeMode{"hp": Filesystem},
		},
		{
			name:       "data volume uses its name as claim",
			vols:       []vol{{name: "dv", claim: "dv-claim", dataVolume: true, attachUID: attachUID}},
			want:       map[string]VolumeMode{"dv": Filesystem},
			claimOfVol: map[string]string{"dv": "dv-claim"},
		},
		{
			name:    "missing attachPodUID is pending",
			vols:    []vol{{name: "hp", claim: "c1"}},
			pending: []string{"hp"},
		},
		{
			name:    "no status entry is pending",
			vols:    []vol{{name: "hp", claim: "c1", noStatus: true}},
			pending: []string{"hp"},
		},
		{
			name: "block mode",
			vols: []vol{{name: "blk", claim: "c2", attachUID: attachUID, mode: "Block"}},
			want: map[string]VolumeMode{"blk": Block},
		},
		{
			name:    "attachment pod not in cache is pending",
			vols:    []vol{{name: "hp", claim: "c1", attachUID: "unknown"}},
			pending: []string{"hp"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmi := mustDecode(t, vmiObject(tt.vols...))
			intents := buildIntents(context.Background(), vmi, pods[launcherUID], pods, staticPV)
			got := map[string]VolumeMode{}
			var pending []string
			for _, in := range intents {
				if in.Refused != nil {
					t.Fatalf("unexpected refusal %v", in.Refused)
				}
				if in.Attachable {
					got[in.Desired.Name] = in.Desired.Mode
					if in.Desired.Source.PVName != "pv-"+in.Claim || in.Desired.LauncherUID != launcherUID || in.Desired.Source.AttachmentPodUID != attachUID {
						t.Fatalf("desired = %+v", in.Desired)
					}
					if in.Desired.CapacityBytes != 10<<30 || in.Desired.FilesystemOverhead != 0.055 {
						t.Fatalf("capacity/overhead = %d/%v", in.Desired.CapacityBytes, in.Desired.FilesystemOverhead)
					}
				} else {
					pending = append(pending, in.Desired.Name)
				}
				if c, ok := tt.claimOfVol[in.Desired.Name]; ok && c != in.Claim {
					t.Fatalf("claim = %q, want %q", in.Claim, c)
				}
			}
			if len(got) != len(tt.want) {
				t.Fatalf("attachable = %v, want %v", got, tt.want)
			}
			for k, v := range tt.want {
				if got[k] != v {
					t.Fatalf("attachable = %v, want %v", got, tt.want)
				}
			}
			if strings.Join(pending, ",") != strings.Join(tt.pending, ",") {
				t.Fatalf("pending = %v, want %v", pending, tt.pending)
			}
		})
	}
}

func TestAttachmentPodRefusals(t *testing.T) {
	tests := []struct {
		name   string
		pod    *corev1.Pod
		reason string
	}{
		{"owned by another launcher", attachmentPod(func(p *corev1.Pod) { p.OwnerReferences[0].UID = otherPodUID }), RefusedAttachOwner},
		{"owner is not controller", attachmentPod(func(p *corev1.Pod) { p.OwnerReferences[0].Controller = nil }), RefusedAttachOwner},
		{"wrong label", attachmentPod(func(p *corev1.Pod) { p.Labels[LabelApp] = AppVirtLauncher }), RefusedAttachLabel},
		{"other namespace", attachmentPod(func(p *corev1.Pod) { p.Namespace = "tenant-b" }), RefusedAttachNamespace},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pods := mapPods{launcherUID: launcherPod(), attachUID: tt.pod}
			vmi := mustDecode(t, vmiObject(vol{name: "hp", claim: "c1", attachUID: attachUID}))
			resolved := false
			resolve := func(ctx context.Context, ns, claim string) (string, error) {
				resolved = true
				return staticPV(ctx, ns, claim)
			}
			intents := buildIntents(context.Background(), vmi, pods[launcherUID], pods, resolve)
			if len(intents) != 1 || intents[0].Refused == nil || intents[0].Refused.Reason != tt.reason {
				t.Fatalf("intents = %+v, want refusal %q", intents, tt.reason)
			}
			if intents[0].Attachable || resolved {
				t.Fatal("refused volume was made attachable or resolved")
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
		{"valid", launcherPod(), ""},
		{"on another node", launcherPod(func(p *corev1.Pod) { p.Spec.NodeName = "node2" }), RefusedLauncherNode},
		{"no hotplug-disks emptyDir", launcherPod(func(p *corev1.Pod) { p.Spec.Volumes = nil }), RefusedLauncherNoHotplug},
		{"hotplug-disks is a hostPath", launcherPod(func(p *corev1.Pod) {
			p.Spec.Volumes[0].VolumeSource = corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/"}}
		}), RefusedLauncherNoHotplug},
		{"created by another VMI", launcherPod(func(p *corev1.Pod) { p.Labels[LabelCreatedBy] = "other-vmi" }), RefusedLauncherLabels},
		{"not a launcher", launcherPod(func(p *corev1.Pod) { p.Labels[LabelApp] = AppHotplugDisk }), RefusedLauncherLabels},
		{"other namespace", launcherPod(func(p *corev1.Pod) { p.Namespace = "tenant-b" }), RefusedLauncherNamespace},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmi := mustDecode(t, vmiObject(vol{name: "hp", claim: "c1", attachUID: attachUID}))
			l, err := findLauncher(vmi, testNode, mapPods{launcherUID: tt.pod})
			var r *Refusal
			if tt.reason == "" {
				if err != nil || l == nil {
					t.Fatalf("launcher %v err %v", l, err)
				}
				return
			}
			if l != nil || !errors.As(err, &r) || r.Reason != tt.reason {
				t.Fatalf("launcher %v err %v, want refusal %q", l, err, tt.reason)
			}
		})
	}
	t.Run("VMI for this node whose launchers all run elsewhere is refused", func(t *testing.T) {
		u := vmiObject()
		u.Object["status"].(map[string]any)["activePods"] = map[string]any{string(launcherUID): "node2"}
		l, err := findLauncher(mustDecode(t, u), testNode, mapPods{launcherUID: launcherPod()})
		var r *Refusal
		if l != nil || !errors.As(err, &r) || r.Reason != RefusedLauncherNode || !strings.Contains(r.Message, "node2") {
			t.Fatalf("launcher %v err %v, want a launcher-node refusal naming node2", l, err)
		}
	})
}

func TestValidateVolumeName(t *testing.T) {
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
			err := ValidateVolumeName(tt.name)
			if (err == nil) != tt.ok {
				t.Fatalf("ValidateVolumeName(%q) = %v, want ok=%v", tt.name, err, tt.ok)
			}
			var r *Refusal
			if err != nil && (!errors.As(err, &r) || r.Reason != RefusedUnsafeName) {
				t.Fatalf("error %v is not an unsafe-name refusal", err)
			}
		})
	}
	t.Run("unsafe name in vmi is refused", func(t *testing.T) {
		pods := mapPods{launcherUID: launcherPod(), attachUID: attachmentPod()}
		vmi := mustDecode(t, vmiObject(vol{name: "..", claim: "c1", attachUID: attachUID}))
		intents := buildIntents(context.Background(), vmi, pods[launcherUID], pods, staticPV)
		if len(intents) != 1 || intents[0].Refused == nil || intents[0].Attachable {
			t.Fatalf("intents = %+v", intents)
		}
	})
}
