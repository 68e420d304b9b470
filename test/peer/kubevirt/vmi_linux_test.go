// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package peer

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	v1 "kubevirt.io/api/core/v1"
	storagetypes "kubevirt.io/kubevirt/pkg/storage/types"
	virthandler "kubevirt.io/kubevirt/pkg/virt-handler"

	"github.com/hpmount/hpmount/kubevirt"
)

// kvVMI is a VMI written with KubeVirt v1.7.0's own Go types that sets
// every field hpmount's model (kubevirt.VMI) reads, each to a value of its
// own, so that a field KubeVirt renamed decodes as zero and a field read
// from the wrong place decodes as another field's value.
func kvVMI() *v1.VirtualMachineInstance {
	block, fs := k8sv1.PersistentVolumeBlock, k8sv1.PersistentVolumeFilesystem
	q := resource.MustParse
	return &v1.VirtualMachineInstance{
		TypeMeta: metav1.TypeMeta{Kind: "VirtualMachineInstance", APIVersion: v1.GroupVersion.String()},
		ObjectMeta: metav1.ObjectMeta{Name: "vm1", Namespace: "ns1", UID: "vmi-uid", ResourceVersion: "42",
			Labels: map[string]string{v1.NodeNameLabel: "node-a", v1.MigrationTargetNodeNameLabel: "node-b"}},
		Spec: v1.VirtualMachineInstanceSpec{Volumes: []v1.Volume{
			{Name: "rootdisk", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{
				PersistentVolumeClaimVolumeSource: k8sv1.PersistentVolumeClaimVolumeSource{ClaimName: "root-pvc"}}}},
			{Name: "hp-pvc", VolumeSource: v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{
				PersistentVolumeClaimVolumeSource: k8sv1.PersistentVolumeClaimVolumeSource{ClaimName: "claim-pvc"}, Hotpluggable: true}}},
			{Name: "hp-dv", VolumeSource: v1.VolumeSource{DataVolume: &v1.DataVolumeSource{Name: "dv-name", Hotpluggable: true}}},
			{Name: "dump", VolumeSource: v1.VolumeSource{MemoryDump: &v1.MemoryDumpVolumeSource{
				PersistentVolumeClaimVolumeSource: v1.PersistentVolumeClaimVolumeSource{
					PersistentVolumeClaimVolumeSource: k8sv1.PersistentVolumeClaimVolumeSource{ClaimName: "dump-pvc"}, Hotpluggable: true}}}},
		}},
		Status: v1.VirtualMachineInstanceStatus{
			NodeName:   "node-a",
			ActivePods: map[types.UID]string{"launcher-a": "node-a", "launcher-b": "node-b"},
			VolumeStatus: []v1.VolumeStatus{
				{Name: "hp-pvc", Target: "sdb", Phase: v1.VolumeReady, Reason: virthandler.VolumeMountedToPodReason, Message: "msg-pvc",
					HotplugVolume: &v1.HotplugVolumeStatus{AttachPodName: "hp-attach-1", AttachPodUID: "attach-uid-1"},
					PersistentVolumeClaimInfo: &v1.PersistentVolumeClaimInfo{ClaimName: "claim-pvc", VolumeMode: &block,
						Capacity: k8sv1.ResourceList{k8sv1.ResourceStorage: q("10Gi")}, Requests: k8sv1.ResourceList{k8sv1.ResourceStorage: q("12Gi")},
						FilesystemOverhead: ptr(v1.Percent("0.055"))}},
				{Name: "hp-dv", Phase: v1.HotplugVolumeMounted, HotplugVolume: &v1.HotplugVolumeStatus{AttachPodName: "hp-attach-2", AttachPodUID: "attach-uid-2"},
					PersistentVolumeClaimInfo: &v1.PersistentVolumeClaimInfo{ClaimName: "dv-name", VolumeMode: &fs}},
				{Name: "dump", Phase: v1.HotplugVolumeUnMounted, HotplugVolume: &v1.HotplugVolumeStatus{AttachPodName: "hp-attach-2", AttachPodUID: "attach-uid-2"},
					MemoryDumpVolume: &v1.DomainMemoryDumpInfo{ClaimName: "dump-pvc", TargetFileName: "dump-file.memory.dump"}},
			},
			MigrationState: &v1.VirtualMachineInstanceMigrationState{MigrationUID: "mig-uid", SourceNode: "node-a", SourcePod: "launcher-a-name",
				TargetNode: "node-b", TargetPod: "launcher-b-name", TargetAttachmentPodUID: "target-attach-uid",
				Completed: true, Failed: true, AbortRequested: true, AbortStatus: v1.MigrationAbortSucceeded},
		},
	}
}

func ptr[T any](v T) *T { return &v }

// decode goes the way the agent's informer goes: JSON, unstructured, then
// the project's own kubevirt.DecodeVMI.
func decode(t *testing.T, raw []byte) *kubevirt.VMI {
	t.Helper()
	var u unstructured.Unstructured
	if err := u.UnmarshalJSON(raw); err != nil {
		t.Fatalf("unmarshal %s: %v", raw, err)
	}
	vmi, err := kubevirt.DecodeVMI(&u)
	if err != nil {
		t.Fatalf("kubevirt.DecodeVMI: %v", err)
	}
	return vmi
}

// TestVMIFieldsKeepTheirJSON: hpmount's model reads every field it has
// from KubeVirt v1.7.0's JSON with the value KubeVirt wrote (compareModel).
func TestVMIFieldsKeepTheirJSON(t *testing.T) {
	raw, err := json.Marshal(kvVMI())
	if err != nil {
		t.Fatal(err)
	}
	for _, problem := range compareModel(t, raw) {
		t.Error(problem)
	}
}

// TestCompareModelCatchesRenames feeds compareModel KubeVirt's JSON with
// one field the model reads renamed, as a KubeVirt release might, and
// requires it to notice: the check above is only as good as this.
func TestCompareModelCatchesRenames(t *testing.T) {
	raw, err := json.Marshal(kvVMI())
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range []string{"targetAttachmentPodUID", "attachPodUID", "activePods", "memoryDumpVolume",
		"hotpluggable", "volumeMode", "filesystemOverhead", "abortStatus", "claimName", "requests"} {
		renamed := strings.ReplaceAll(string(raw), `"`+key+`":`, `"`+key+`Renamed":`)
		if problems := compareModel(t, []byte(renamed)); len(problems) == 0 {
			t.Errorf("renaming %q in KubeVirt's JSON went unnoticed", key)
		}
	}
}

// compareModel decodes KubeVirt's JSON with hpmount's model and lists, for
// every JSON field of the model's spec and status, a fixture that left it
// unset (so a field nobody checks cannot hide) or a value that differs from
// the one KubeVirt's JSON has at the same path.
func compareModel(t *testing.T, raw []byte) []string {
	hp := decode(t, raw)
	back, err := json.Marshal(hp)
	if err != nil {
		t.Fatal(err)
	}
	var problems []string
	kvFlat, hpFlat := flatten(t, raw), flatten(t, back)
	for path, got := range hpFlat {
		if want, ok := kvFlat[path]; !ok || want != got {
			problems = append(problems, fmt.Sprintf("%s: hpmount decoded %s, KubeVirt v1.7.0 wrote %s (present %v)", path, got, want, ok))
		}
	}
	// Fields of hpmount's model that KubeVirt v1.7.0 does not have; each is
	// checked against its documented JSON instead (TestUtilityVolumesFixture).
	absent := map[string]string{"spec.utilityVolumes": "after v1.7.0 (VEP utility volumes); fixture testdata/utility-volumes.json"}
	covered := map[string]bool{}
	for path := range hpFlat {
		covered[pattern(path)] = true
	}
	for _, want := range modelPaths(reflect.TypeFor[kubevirt.VMI]()) {
		if _, ok := absentPrefix(absent, want); !ok && !covered[want] {
			problems = append(problems, fmt.Sprintf("%s: hpmount's model reads it but KubeVirt's JSON left it empty", want))
		}
	}
	slices.Sort(problems)
	return problems
}

func absentPrefix(absent map[string]string, path string) (string, bool) {
	for p, why := range absent {
		if path == p || strings.HasPrefix(path, p+".") || strings.HasPrefix(path, p+"[]") {
			return why, true
		}
	}
	return "", false
}

// flatten maps each scalar of a JSON document to its path, arrays as
// name[i], object keys joined with dots.
func flatten(t *testing.T, raw []byte) map[string]string {
	t.Helper()
	var doc any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	var walk func(prefix string, v any)
	walk = func(prefix string, v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, e := range v {
				walk(strings.TrimPrefix(prefix+"."+k, "."), e)
			}
		case []any:
			for i, e := range v {
				walk(fmt.Sprintf("%s[%d]", prefix, i), e)
			}
		default:
			b, _ := json.Marshal(v)
			out[prefix] = string(b)
		}
	}
	walk("", doc)
	return out
}

// pattern turns a concrete path of the spec or status into the form
// modelPaths lists: indexes become [], map keys of the maps the model reads
// become {}.
func pattern(path string) string {
	var b strings.Builder
	for i, part := range strings.Split(path, ".") {
		if i > 0 {
			b.WriteByte('.')
		}
		if j := strings.IndexByte(part, '['); j >= 0 {
			part = part[:j] + "[]"
		}
		b.WriteString(part)
	}
	p := b.String()
	for _, m := range []string{"status.activePods."} {
		if i := strings.Index(p, m); i >= 0 {
			p = p[:i+len(m)] + "{}"
		}
	}
	return p
}

// modelPaths lists the JSON leaf paths of the model's spec and status.
func modelPaths(t reflect.Type) []string {
	var out []string
	var walk func(prefix string, t reflect.Type)
	walk = func(prefix string, t reflect.Type) {
		for t.Kind() == reflect.Pointer {
			t = t.Elem()
		}
		switch {
		case t.Kind() == reflect.Slice:
			walk(prefix+"[]", t.Elem())
		case t.Kind() == reflect.Map:
			out = append(out, prefix+".{}")
		case t.Kind() == reflect.Struct && t != reflect.TypeFor[resource.Quantity]():
			for i := range t.NumField() {
				name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
				walk(prefix+"."+name, t.Field(i).Type)
			}
		default:
			out = append(out, prefix)
		}
	}
	for _, top := range []string{"Spec", "Status"} {
		f, _ := t.FieldByName(top)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		walk(name, f.Type)
	}
	slices.Sort(out)
	return out
}

// TestVMIMeaning holds hpmount's reading of the fields to KubeVirt's own
// functions and constants: which volumes are hotplug volumes, which are
// block, which are bound as a directory, the node labels, the phases and
// reasons, and how a migration ended.
func TestVMIMeaning(t *testing.T) {
	kv := kvVMI()
	raw, err := json.Marshal(kv)
	if err != nil {
		t.Fatal(err)
	}
	hp := decode(t, raw)

	for i, kvVol := range kv.Spec.Volumes {
		claim, ok := hp.Spec.Volumes[i].Hotpluggable()
		if want := storagetypes.IsHotplugVolume(&kvVol); ok != want {
			t.Errorf("volume %q: hpmount hotpluggable %v, KubeVirt IsHotplugVolume %v", kvVol.Name, ok, want)
		}
		if want := kvClaim(kvVol); ok && claim != want {
			t.Errorf("volume %q: hpmount claim %q, KubeVirt's source names %q", kvVol.Name, claim, want)
		}
	}
	byName := map[string]kubevirt.HotplugVolume{}
	for _, hv := range kubevirt.HotplugVolumes(hp, nil, kubevirt.PodMap{}) {
		byName[hv.Name] = hv
	}
	for _, st := range kv.Status.VolumeStatus {
		hv := byName[st.Name]
		// virt-handler's mounter: a block node when the claim info says
		// Block, a directory when the entry has memoryDumpVolume, else
		// <vol>.img (pkg/virt-handler/hotplug-disk/mount.go).
		want := kubevirt.Filesystem
		switch {
		case st.PersistentVolumeClaimInfo != nil && storagetypes.IsPVCBlock(st.PersistentVolumeClaimInfo.VolumeMode):
			want = kubevirt.Block
		case st.MemoryDumpVolume != nil:
			want = kubevirt.Directory
		}
		if hv.Mode != want {
			t.Errorf("volume %q: hpmount mode %s, KubeVirt's mounter %s", st.Name, hv.Mode, want)
		}
		if hv.AttachPodUID != st.HotplugVolume.AttachPodUID {
			t.Errorf("volume %q: attachment pod %q, want %q", st.Name, hv.AttachPodUID, st.HotplugVolume.AttachPodUID)
		}
	}

	// The plural the CRD registers, derived from the kind the way KubeVirt's
	// client does for its resources (kubecli: "virtualmachineinstances").
	vmiResource, _ := meta.UnsafeGuessKindToResource(v1.VirtualMachineInstanceGroupVersionKind)
	consts := []struct{ name, hp, kv string }{
		{"node label", kubevirt.LabelNodeName, v1.NodeNameLabel},
		{"migration target label", kubevirt.LabelMigrationTargetNode, v1.MigrationTargetNodeNameLabel},
		{"migration job label", kubevirt.LabelMigrationJobUID, v1.MigrationJobLabel},
		{"created-by label", kubevirt.LabelCreatedBy, v1.CreatedByLabel},
		{"app label", kubevirt.LabelApp, v1.AppLabel},
		{"api version", kubevirt.VMIAPIVersion, v1.GroupVersion.String()},
		{"kind", kubevirt.VMIKind, v1.VirtualMachineInstanceGroupVersionKind.Kind},
		{"resource", kubevirt.VMIResource.String(), vmiResource.String()},
		{"phase MountedToPod", kubevirt.PhaseMountedToPod, string(v1.HotplugVolumeMounted)},
		{"phase UnMountedFromPod", kubevirt.PhaseUnMountedFromPod, string(v1.HotplugVolumeUnMounted)},
		{"phase Ready", kubevirt.PhaseReady, string(v1.VolumeReady)},
		{"reason mounted", kubevirt.ReasonMountedToPod, virthandler.VolumeMountedToPodReason},
		{"reason unmounted", kubevirt.ReasonUnMounted, virthandler.VolumeUnMountedFromPodReason},
		{"abort succeeded", kubevirt.AbortSucceeded, string(v1.MigrationAbortSucceeded)},
		{"block mode", string(kubevirt.Block), string(k8sv1.PersistentVolumeBlock)},
		{"filesystem mode", string(kubevirt.Filesystem), string(k8sv1.PersistentVolumeFilesystem)},
	}
	for _, c := range consts {
		if c.hp != c.kv {
			t.Errorf("%s: hpmount %q, KubeVirt v1.7.0 %q", c.name, c.hp, c.kv)
		}
	}
	if got := hp.Labels[v1.NodeNameLabel]; got != "node-a" {
		t.Errorf("node label decoded as %q", got)
	}
	if got := hp.Labels[v1.MigrationTargetNodeNameLabel]; got != "node-b" {
		t.Errorf("migration target label decoded as %q", got)
	}
	testMigrationMeaning(t)
}

// kvClaim is the claim behind a KubeVirt volume source.
func kvClaim(v v1.Volume) string {
	switch {
	case v.PersistentVolumeClaim != nil:
		return v.PersistentVolumeClaim.ClaimName
	case v.DataVolume != nil:
		return v.DataVolume.Name
	case v.MemoryDump != nil:
		return v.MemoryDump.ClaimName
	}
	return ""
}

// testMigrationMeaning sets each end of a migration with KubeVirt's types
// and checks hpmount's reading of it and of each node's role.
func testMigrationMeaning(t *testing.T) {
	cases := []struct {
		name  string
		state v1.VirtualMachineInstanceMigrationState
		want  kubevirt.MigrationPhase
	}{
		{"running", v1.VirtualMachineInstanceMigrationState{}, kubevirt.MigrationRunning},
		{"abort requested only", v1.VirtualMachineInstanceMigrationState{AbortRequested: true, AbortStatus: v1.MigrationAbortInProgress}, kubevirt.MigrationRunning},
		{"abort failed", v1.VirtualMachineInstanceMigrationState{AbortStatus: v1.MigrationAbortFailed}, kubevirt.MigrationRunning},
		{"completed", v1.VirtualMachineInstanceMigrationState{Completed: true}, kubevirt.MigrationSucceeded},
		{"failed", v1.VirtualMachineInstanceMigrationState{Completed: true, Failed: true}, kubevirt.MigrationFailed},
		{"aborted", v1.VirtualMachineInstanceMigrationState{Completed: true, AbortStatus: v1.MigrationAbortSucceeded}, kubevirt.MigrationAborted},
	}
	for _, c := range cases {
		kv := kvVMI()
		st := c.state
		st.MigrationUID, st.SourceNode, st.TargetNode, st.TargetAttachmentPodUID = "m1", "node-a", "node-b", "tap"
		kv.Status.MigrationState = &st
		raw, err := json.Marshal(kv)
		if err != nil {
			t.Fatal(err)
		}
		hp := decode(t, raw)
		for node, role := range map[string]kubevirt.MigrationRole{"node-a": kubevirt.RoleSource, "node-b": kubevirt.RoleTarget, "node-c": kubevirt.RoleNone} {
			m := kubevirt.MigrationOf(hp, node)
			if m.Phase != c.want || m.Role != role || m.TargetAttachmentPodUID != "tap" {
				t.Errorf("%s on %s: hpmount read %+v, want phase %s role %q", c.name, node, m, c.want, role)
			}
		}
	}
}

// TestUtilityVolumesFixture decodes spec.utilityVolumes as the utility
// volumes VEP documents it (name, inlined PersistentVolumeClaimVolumeSource,
// optional type): KubeVirt v1.7.0's types do not have the field yet, so
// there the VMI is the fixture; v1.8.4's have, and there it is built from
// them (utilityVolumesVMI).
func TestUtilityVolumesFixture(t *testing.T) {
	hp := decode(t, utilityVolumesVMI(t))
	want := []kubevirt.UtilityVolume{
		{Name: "dump-u", ClaimName: "dump-claim", Type: "MemoryDump"},
		{Name: "backup-u", ClaimName: "backup-claim", Type: "Backup"},
		{Name: "plain-u", ClaimName: "plain-claim"},
	}
	if !reflect.DeepEqual(hp.Spec.UtilityVolumes, want) {
		t.Errorf("utility volumes decoded as %+v, want %+v", hp.Spec.UtilityVolumes, want)
	}
	for _, hv := range kubevirt.HotplugVolumes(hp, nil, kubevirt.PodMap{}) {
		if hv.Mode != kubevirt.Directory || hv.Refused != nil {
			t.Errorf("utility volume %q: mode %s refused %v, want a directory bind", hv.Name, hv.Mode, hv.Refused)
		}
	}
}

// TestVMIMeaningKnownDifferences pins the volumes whose kind hpmount reads
// differently from KubeVirt v1.7.0's mounter, each listed in docs/coexistence.md's
// table with its reason, so that a change on either side shows here.
// KubeVirt's rule (pkg/virt-handler/hotplug-disk/mount.go isBlockVolume,
// mountFromPod): Block claim info gives a block node, else a status entry
// with memoryDumpVolume gives a directory, else <vol>.img.
func TestVMIMeaningKnownDifferences(t *testing.T) {
	block := k8sv1.PersistentVolumeBlock
	dump := v1.Volume{Name: "dump", VolumeSource: v1.VolumeSource{MemoryDump: &v1.MemoryDumpVolumeSource{
		PersistentVolumeClaimVolumeSource: v1.PersistentVolumeClaimVolumeSource{
			PersistentVolumeClaimVolumeSource: k8sv1.PersistentVolumeClaimVolumeSource{ClaimName: "dump-pvc"}, Hotpluggable: true}}}}
	hotplug := &v1.HotplugVolumeStatus{AttachPodName: "hp", AttachPodUID: "attach"}
	cases := []struct {
		name    string
		status  v1.VolumeStatus
		kv      kubevirt.VolumeMode
		hp      kubevirt.VolumeMode
		refused bool
		why     string
	}{
		{"memory dump before its memoryDumpVolume status", v1.VolumeStatus{Name: "dump", HotplugVolume: hotplug},
			kubevirt.Filesystem, kubevirt.Directory, false,
			"hpmount goes by spec.volumes[].memoryDump too: the claim holds no disk.img to bind"},
		{"memory dump on a Block claim", v1.VolumeStatus{Name: "dump", HotplugVolume: hotplug,
			MemoryDumpVolume:          &v1.DomainMemoryDumpInfo{ClaimName: "dump-pvc"},
			PersistentVolumeClaimInfo: &v1.PersistentVolumeClaimInfo{ClaimName: "dump-pvc", VolumeMode: &block}},
			kubevirt.Block, kubevirt.Block, true,
			"hpmount refuses it (unknown-volume-mode): a dump is written as a file into a directory"},
	}
	for _, c := range cases {
		kv := kvVMI()
		kv.Spec.Volumes = []v1.Volume{dump}
		kv.Status.VolumeStatus = []v1.VolumeStatus{c.status}
		raw, err := json.Marshal(kv)
		if err != nil {
			t.Fatal(err)
		}
		hvs := kubevirt.HotplugVolumes(decode(t, raw), nil, kubevirt.PodMap{})
		if len(hvs) != 1 {
			t.Fatalf("%s: %d hotplug volumes, want 1", c.name, len(hvs))
		}
		st := c.status
		kvMode := kubevirt.Filesystem
		switch {
		case st.PersistentVolumeClaimInfo != nil && storagetypes.IsPVCBlock(st.PersistentVolumeClaimInfo.VolumeMode):
			kvMode = kubevirt.Block
		case st.MemoryDumpVolume != nil:
			kvMode = kubevirt.Directory
		}
		if kvMode != c.kv || hvs[0].Mode != c.hp || (hvs[0].Refused != nil) != c.refused {
			t.Errorf("%s: KubeVirt %s, hpmount %s refused %v; the table says KubeVirt %s, hpmount %s refused %v (%s)",
				c.name, kvMode, hvs[0].Mode, hvs[0].Refused, c.kv, c.hp, c.refused, c.why)
		}
	}
}
