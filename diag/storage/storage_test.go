// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package storage

import (
	"context"
	"strings"
	"testing"

	storagev1 "k8s.io/api/storage/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	fakediscovery "k8s.io/client-go/discovery/fake"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"sigs.k8s.io/yaml"
)

const (
	node0 = "harvester-node-0"
	node2 = "harvester-node-2"
	csi0  = "csi-f080d69495b619fad93621ff3d57201793952e422304cceac8807e975ccf795d"
	csi2  = "csi-5852f2d48d96311bb582eeeaad0e38361031d502899416c71cea10795748a84b"
	snap2 = "snapshot-controller-snapshot-a36bedf5-fb3b-4b30-a10d-ed98f9c0323a"
)

// lhYAML is a Longhorn VolumeAttachment in the shape longhorn-manager
// writes (the migration example of the reference documents).
const lhYAML = `
apiVersion: longhorn.io/v1beta2
kind: VolumeAttachment
metadata: {name: pvc-0dc9, namespace: longhorn-system}
spec:
  volume: pvc-0dc9
  attachmentTickets:
    ` + csi2 + `: {generation: 0, id: ` + csi2 + `, nodeID: ` + node2 + `, type: csi-attacher, parameters: {disableFrontend: "false", lastAttachedBy: ""}}
    ` + csi0 + `: {generation: 0, id: ` + csi0 + `, nodeID: ` + node0 + `, type: csi-attacher, parameters: {disableFrontend: "false", lastAttachedBy: ""}}
status:
  attachmentTicketStatuses:
    ` + csi2 + `:
      id: ` + csi2 + `
      generation: 0
      satisfied: true
      conditions: [{lastProbeTime: "", lastTransitionTime: "2025-12-10T04:19:49Z", message: "", reason: "", status: "True", type: Satisfied}]
    ` + csi0 + `:
      id: ` + csi0 + `
      generation: 0
      satisfied: true
      conditions: [{lastProbeTime: "", lastTransitionTime: "2025-12-10T04:21:00Z", message: The migrating attachment ticket is satisfied, reason: "", status: "True", type: Satisfied}]
`

func decodeYAML(t *testing.T, doc string) *unstructured.Unstructured {
	t.Helper()
	u := &unstructured.Unstructured{}
	if err := yaml.Unmarshal([]byte(doc), &u.Object); err != nil {
		t.Fatal(err)
	}
	return u
}

// TestTicketsOf decodes the reference's migration VolumeAttachment: both
// csi-attacher tickets satisfied, sorted by ID, the condition's message
// kept; a status of an older generation does not satisfy a ticket.
func TestTicketsOf(t *testing.T) {
	var a lhAttachment
	if err := decodeInto(decodeYAML(t, lhYAML), &a); err != nil {
		t.Fatal(err)
	}
	got := ticketsOf(&a)
	want := []Ticket{
		{ID: csi2, Type: "csi-attacher", Node: node2, Satisfied: true},
		{ID: csi0, Type: "csi-attacher", Node: node0, Satisfied: true, Message: "The migrating attachment ticket is satisfied"},
	}
	if len(got) != len(want) {
		t.Fatalf("tickets %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("ticket %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	a.Spec.AttachmentTickets[csi0].Generation = 2
	for _, tk := range ticketsOf(&a) {
		if tk.ID == csi0 && (tk.Satisfied || !strings.Contains(tk.Message, "generation 0, the ticket is at 2")) {
			t.Errorf("ticket of generation 2 with a status of generation 0: %+v, want not satisfied and why", tk)
		}
	}
}

func TestProblem(t *testing.T) {
	csiHere := Ticket{ID: csi0, Type: "csi-attacher", Node: node0, Satisfied: true}
	waitHere := Ticket{ID: csi0, Type: "csi-attacher", Node: node0, Message: "waiting for the volume to be detached"}
	snapThere := Ticket{ID: snap2, Type: "snapshot-controller", Node: node2, Satisfied: true}
	csiThere := Ticket{ID: csi2, Type: "csi-attacher", Node: node2, Satisfied: true}
	lh := func(state, robust, cur, mig string, tickets ...Ticket) *LonghornVolume {
		return &LonghornVolume{Namespace: "longhorn-system", Name: "pvc-0dc9", AccessMode: "rwx", Migratable: true,
			State: state, Robustness: robust, CurrentNode: cur, CurrentMigrationNode: mig, Tickets: tickets}
	}
	vaHere := &CSIAttachment{Name: "csi-aaa", Node: node0, Attached: true}
	tests := []struct {
		name string
		st   Side
		want []string // substrings of the problem; none: no problem
	}{
		{"attached here", Side{VolumeAttachment: vaHere, Longhorn: lh("attached", "healthy", node0, "", csiHere)}, nil},
		{"migrating to this node, both tickets satisfied",
			Side{VolumeAttachment: vaHere, Elsewhere: []CSIAttachment{{Name: "csi-bbb", Node: node2, Attached: true}},
				Longhorn: lh("attached", "healthy", node2, node0, csiThere, csiHere)}, nil},
		{"detach stuck behind a snapshot ticket",
			Side{VolumeAttachment: &CSIAttachment{Name: "csi-aaa", Node: node0},
				Longhorn: lh("attached", "healthy", node2, "", snapThere, waitHere)},
			[]string{"attached to node " + node2 + ", not this node", "held there by ticket " + snap2 + " (snapshot-controller)",
				"waiting: ticket " + csi0 + " (csi-attacher) for node " + node0 + " [waiting for the volume to be detached]",
				"VolumeAttachment csi-aaa is not attached to this node yet"}},
		{"attached to the wrong node, no ticket here",
			Side{Elsewhere: []CSIAttachment{{Name: "csi-bbb", Node: node2, Attached: true}},
				Longhorn: lh("attached", "healthy", node2, "", csiThere)},
			[]string{"Longhorn volume longhorn-system/pvc-0dc9 is attached to node " + node2, "the PV is attached to node " + node2 + " (VolumeAttachment csi-bbb), not this node"}},
		{"detached, ticket here waits", Side{Longhorn: lh("detached", "unknown", "", "", waitHere)},
			[]string{"(detached): not satisfied: ticket " + csi0}},
		{"rwx share manager attached elsewhere", Side{Longhorn: func() *LonghornVolume {
			v := lh("attached", "healthy", node2, "", Ticket{ID: "share-manager-controller-x", Type: "share-manager-controller", Node: node2, Satisfied: true})
			v.Migratable = false
			return v
		}()}, nil},
		{"faulted", Side{Longhorn: lh("detached", "faulted", "", "")}, []string{"is faulted"}},
		{"attach error", Side{VolumeAttachment: &CSIAttachment{Name: "csi-aaa", Node: node0, AttachError: "rpc error: volume is not ready"}},
			[]string{"VolumeAttachment csi-aaa: attach to this node failed: rpc error: volume is not ready"}},
		{"detach from another node stuck",
			Side{VolumeAttachment: vaHere, Elsewhere: []CSIAttachment{{Name: "csi-bbb", Node: node2, Attached: true, Deleting: true, DetachError: "volume is busy"}}},
			[]string{"detach from node " + node2 + " is stuck (VolumeAttachment csi-bbb): volume is busy"}},
		{"detach from another node pending", Side{VolumeAttachment: vaHere, Elsewhere: []CSIAttachment{{Name: "csi-bbb", Node: node2, Attached: true, Deleting: true}}},
			[]string{"detach from node " + node2 + " has not finished"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := problem(&tc.st, node0)
			if len(tc.want) == 0 && got != "" {
				t.Fatalf("problem %q, want none", got)
			}
			for _, w := range tc.want {
				if !strings.Contains(got, w) {
					t.Errorf("problem %q lacks %q", got, w)
				}
			}
		})
	}
}

var lhResources = &metav1.APIResourceList{GroupVersion: LonghornGroupVersion.String(), APIResources: []metav1.APIResource{
	{Name: "volumes", Namespaced: true, Kind: "Volume"}, {Name: "volumeattachments", Namespaced: true, Kind: "VolumeAttachment"},
}}

func lhVolumeObj(t *testing.T) *unstructured.Unstructured {
	return decodeYAML(t, `
apiVersion: longhorn.io/v1beta2
kind: Volume
metadata: {name: pvc-0dc9, namespace: longhorn-system}
spec: {accessMode: rwx, migratable: true, numberOfReplicas: 3, size: "1073741824", frontend: blockdev}
status: {state: attached, robustness: healthy, currentNodeID: `+node2+`, currentMigrationNodeID: `+node0+`,
  kubernetesStatus: {pvName: pv-data, pvStatus: Bound, namespace: default, pvcName: claim-data}}
`)
}

// TestCollect reads through the clients' fakes: what is served and
// allowed is read and decoded, what is absent or forbidden is one note.
func TestCollect(t *testing.T) {
	pv := "pv-data"
	va := &storagev1.VolumeAttachment{ObjectMeta: metav1.ObjectMeta{Name: "csi-aaa"},
		Spec:   storagev1.VolumeAttachmentSpec{Attacher: "driver.longhorn.io", NodeName: node0, Source: storagev1.VolumeAttachmentSource{PersistentVolumeName: &pv}},
		Status: storagev1.VolumeAttachmentStatus{Attached: true}}
	listKinds := map[schema.GroupVersionResource]string{LonghornVolumes: "VolumeList", LonghornAttachments: "VolumeAttachmentList"}
	tests := []struct {
		name           string
		longhorn       bool
		forbidVA       bool
		wantVA, wantLH string
		wantNote       []string
	}{
		{"everything", true, false, SourceRead, SourceRead, nil},
		{"no Longhorn", false, false, SourceRead, SourceAbsent, []string{"Longhorn is not installed"}},
		{"VolumeAttachments forbidden", true, true, SourceForbidden, SourceRead,
			[]string{"list volumeattachments.storage.k8s.io is forbidden", "deploy/storage-view"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			kube := kubefake.NewClientset(va)
			if tc.longhorn {
				kube.Discovery().(*fakediscovery.FakeDiscovery).Resources = []*metav1.APIResourceList{lhResources}
			}
			if tc.forbidVA {
				kube.PrependReactor("list", "volumeattachments", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewForbidden(storagev1.Resource("volumeattachments"), "", nil)
				})
			}
			dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), listKinds, lhVolumeObj(t), decodeYAML(t, lhYAML))
			sv := Collect(context.Background(), kube, dyn, metav1.ListOptions{})
			if sv.src.VolumeAttachments != tc.wantVA || sv.src.Longhorn != tc.wantLH {
				t.Fatalf("sources %+v, want volumeAttachments %s, longhorn %s", sv.src, tc.wantVA, tc.wantLH)
			}
			for _, w := range tc.wantNote {
				if !strings.Contains(sv.src.Note, w) {
					t.Errorf("note %q lacks %q", sv.src.Note, w)
				}
			}
			if len(tc.wantNote) == 0 && sv.src.Note != "" {
				t.Errorf("note %q, want none", sv.src.Note)
			}
			st := sv.Of(pv, node0)
			if st == nil {
				t.Fatal("no storage side for the PV")
			}
			if got := st.VolumeAttachment != nil; got != (tc.wantVA == SourceRead) {
				t.Errorf("VolumeAttachment %+v", st.VolumeAttachment)
			}
			if got := st.Longhorn != nil; got != (tc.wantLH == SourceRead) {
				t.Fatalf("Longhorn %+v", st.Longhorn)
			}
			if st.Longhorn != nil && (st.Longhorn.CurrentMigrationNode != node0 || len(st.Longhorn.Tickets) != 2 || st.Problem != "") {
				t.Errorf("Longhorn %+v problem %q: want migrating to %s, two tickets, no problem", st.Longhorn, st.Problem, node0)
			}
		})
	}
}
