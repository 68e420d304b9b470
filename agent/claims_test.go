// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	"github.com/hpmount/hpmount/kubevirt"
	kt "github.com/hpmount/hpmount/kubevirt/kubevirttest"
)

// setClaim creates or replaces a claim on the fake API server.
func (ta *testAgent) setClaim(t testing.TB, c *corev1.PersistentVolumeClaim) {
	t.Helper()
	claims := ta.kube.CoreV1().PersistentVolumeClaims(c.Namespace)
	if _, err := claims.Update(context.Background(), c, metav1.UpdateOptions{}); err == nil {
		return
	}
	if _, err := claims.Create(context.Background(), c, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create claim: %v", err)
	}
}

func (ta *testAgent) deleteClaim(t testing.TB, name string) {
	t.Helper()
	if err := ta.kube.CoreV1().PersistentVolumeClaims(testNS).Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete claim: %v", err)
	}
}

// claimCalls counts the agent's requests for claims by verb.
func (ta *testAgent) claimCalls(verb string) int {
	n := 0
	for _, a := range ta.kube.Actions() {
		if a.GetResource().Resource == "persistentvolumeclaims" && a.GetVerb() == verb {
			n++
		}
	}
	return n
}

func TestClaimNeeds(t *testing.T) {
	target := kt.TargetLauncher()
	pods := kubevirt.PodMap{launcherUID: launcherPod(), attachUID: attachmentPod(),
		target.UID: target, kt.TargetAttachUID: kt.TargetAttachmentPod(),
		"stray-uid":        attachmentPod(func(p *corev1.Pod) { p.UID, p.OwnerReferences[0].UID = "stray-uid", "some-pod" }),
		"other-vmi-attach": attachmentPod(func(p *corev1.Pod) { p.UID, p.OwnerReferences[0].UID = "other-vmi-attach", "other-launcher" }),
		"other-launcher":   launcherPod(func(p *corev1.Pod) { p.UID, p.Labels[kubevirt.LabelCreatedBy] = "other-launcher", "other-vmi" })}
	tests := []struct {
		name string
		vols []vol
		mut  func(*kubevirt.VMI)
		want map[string][]types.UID
	}{
		{"attachment pod on the node", []vol{{Name: "hp", Claim: "c1", AttachUID: attachUID}}, nil,
			map[string][]types.UID{"c1": {attachUID}}},
		{"attachment pod not on the node", []vol{{Name: "hp", Claim: "c1", AttachUID: "elsewhere"}}, nil,
			map[string][]types.UID{}},
		{"no attachment pod yet", []vol{{Name: "hp", Claim: "c1"}}, nil, map[string][]types.UID{}},
		{"a pod no launcher controls", []vol{{Name: "hp", Claim: "c1", AttachUID: "stray-uid"}}, nil, map[string][]types.UID{}},
		{"another VMI's attachment pod", []vol{{Name: "hp", Claim: "c1", AttachUID: "other-vmi-attach"}}, nil, map[string][]types.UID{}},
		{"the launcher itself", []vol{{Name: "hp", Claim: "c1", AttachUID: launcherUID}}, nil, map[string][]types.UID{}},
		{"two volumes of one claim", []vol{{Name: "a", Claim: "c1", AttachUID: attachUID}, {Name: "b", Claim: "c1", AttachUID: attachUID}}, nil,
			map[string][]types.UID{"c1": {attachUID}}},
		{"migration target's attachment pod", []vol{{Name: "hp", Claim: "c1", AttachUID: "source-attach"}},
			func(v *kubevirt.VMI) {
				v.Status.MigrationState = &kubevirt.MigrationState{TargetAttachmentPodUID: kt.TargetAttachUID}
			}, map[string][]types.UID{"c1": {kt.TargetAttachUID}}},
		{"claim named only by the status", []vol{{Name: "hp", Claim: "c1", AttachUID: attachUID}},
			func(v *kubevirt.VMI) {
				v.Spec.Volumes[0].PersistentVolumeClaim.ClaimName = ""
				v.Status.VolumeStatus[0].PersistentVolumeClaimInfo = &kubevirt.PersistentVolumeClaimInfo{ClaimName: "c9"}
			}, map[string][]types.UID{"c9": {attachUID}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vmi := kt.Decode(vmiObject(tt.vols...))
			if tt.mut != nil {
				tt.mut(vmi)
			}
			got := kubevirt.ClaimPods(vmi, pods)
			if fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Fatalf("needs = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestClaimReadOncePerAttachmentPod: a bound claim is read once for its
// attachment pod, however many passes follow, and again for a new one.
func TestClaimReadOncePerAttachmentPod(t *testing.T) {
	ta := standardAgent(t, func(c *Config) { c.GrowFilesystems = false })
	ta.setVMI(t, vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: attachUID}))
	for range 3 {
		if err := ta.reconcile(context.Background(), testKey); err != nil {
			t.Fatal(err)
		}
	}
	if n := ta.claimCalls("get"); n != 1 {
		t.Fatalf("%d GETs of the claim for three passes, want 1", n)
	}
	ta.addPods(t, attachmentPod(func(p *corev1.Pod) { p.UID = "attach-uid-2" }))
	ta.setVMI(t, vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: "attach-uid-2"}))
	if err := ta.reconcile(context.Background(), testKey); err != nil {
		t.Fatal(err)
	}
	if n := ta.claimCalls("get"); n != 2 {
		t.Fatalf("%d GETs after a new attachment pod named the claim, want 2", n)
	}
}

// TestClaimBoundLaterIsNoticed: a claim not bound yet is a pending volume
// and an error that retries the pass, with the words of the claim
// informer; it is not remembered, so the pass the attachment pod's update
// brings once the claim is bound attaches the volume.
func TestClaimBoundLaterIsNoticed(t *testing.T) {
	ta := standardAgent(t, func(c *Config) { c.GrowFilesystems = false })
	ta.setClaim(t, pvc("c1", ""))
	ta.setVMI(t, vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: attachUID}))
	err := ta.reconcile(context.Background(), testKey)
	if err == nil || !strings.Contains(err.Error(), "persistentvolumeclaim "+testNS+"/c1 is not bound") {
		t.Fatalf("reconcile of an unbound claim: %v", err)
	}
	if n := ta.engine.count("attach"); n != 0 {
		t.Fatalf("attached from an unbound claim: %v", ta.engine.changing())
	}
	ta.setClaim(t, pvc("c1", "pv-1"))
	ta.enqueuePod(attachmentPod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodRunning }))
	key, _ := ta.queue.Get()
	ta.queue.Done(key)
	if key != testKey {
		t.Fatalf("the attachment pod's update queued %q, want %q", key, testKey)
	}
	if err := ta.reconcile(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	if got := ta.engine.changing(); !slices.Equal(got, []string{"attach hp Filesystem attach-uid/pv-1"}) {
		t.Fatalf("calls once bound = %v", got)
	}
}

// TestClaimReadErrorIsTransient: an API error reading a claim retries the
// pass, names the claim, and neither attaches nor detaches; it is not
// remembered.
func TestClaimReadErrorIsTransient(t *testing.T) {
	ta := standardAgent(t, func(c *Config) { c.GrowFilesystems = false })
	ta.engine.setObserved(launcherUID, healthyObserved("hp", kubevirt.Filesystem))
	ta.kube.PrependReactor("get", "persistentvolumeclaims", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, errors.New("connection refused")
	})
	ta.setVMI(t, vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: attachUID}, vol{Name: "new", Claim: "c2", AttachUID: attachUID}))
	err := ta.reconcile(context.Background(), testKey)
	if err == nil || !strings.Contains(err.Error(), "get persistentvolumeclaim "+testNS+"/c1: connection refused") {
		t.Fatalf("reconcile with the claim unreadable: %v", err)
	}
	if got := ta.engine.changing(); len(got) != 0 {
		t.Fatalf("changed the node on an API error: %v", got)
	}
	if n := ta.claims.len(); n != 0 {
		t.Fatalf("cache holds %d claims after failed reads", n)
	}
}

// TestClaimCacheHoldsTheNodesClaims: with 20,000 claims in the cluster,
// of which the node's VMIs name 40, the agent reads and holds 40, and
// drops what its VMIs no longer name at the next resync.
func TestClaimCacheHoldsTheNodesClaims(t *testing.T) {
	var objs []runtime.Object
	for i := range 20000 {
		objs = append(objs, &corev1.PersistentVolumeClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: fmt.Sprintf("tenant-%d", i%50), Name: fmt.Sprintf("c%d", i),
				UID: types.UID(fmt.Sprintf("uid-%d", i))},
			Spec: corev1.PersistentVolumeClaimSpec{VolumeName: fmt.Sprintf("pv-%d", i)},
		})
	}
	var vols []vol
	for i := range 40 {
		name := fmt.Sprintf("n%d", i)
		objs = append(objs, pvc(name, "pv-"+name))
		vols = append(vols, vol{Name: "hp" + name, Claim: name, AttachUID: attachUID})
	}
	ta := newTestAgent(t, func(c *Config) { c.GrowFilesystems = false }, objs...)
	ta.addPods(t, launcherPod(), attachmentPod())
	ta.setVMI(t, vmiObject(vols...))
	if err := ta.reconcile(context.Background(), testKey); err != nil {
		t.Fatal(err)
	}
	if n, attached := ta.claims.len(), ta.engine.count("attach"); n != 40 || attached != 40 {
		t.Fatalf("cache holds %d claims and %d volumes attached, want 40 and 40", n, attached)
	}
	if reads := ta.claimCalls("get") + ta.claimCalls("list"); reads > 40 {
		t.Fatalf("%d reads of claims for 40", reads)
	}
	ta.setVMI(t, vmiObject(vols[:1]...))
	ta.pruneClaims()
	if n := ta.claims.len(); n != 1 {
		t.Fatalf("cache holds %d claims after the VMI dropped all but one, want 1", n)
	}
}

// TestClaimFillListsASmallNamespace: many missing claims of a namespace
// that holds little else are read with one list of it, not a GET each; a
// namespace much larger than what the node wants is not listed.
func TestClaimFillListsASmallNamespace(t *testing.T) {
	tests := []struct {
		name         string
		others       int
		lists, gets  int
		wantInCached int
	}{
		{"small namespace", 5, 2, 0, 20},
		{"large namespace", 100, 1, 20, 20},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var objs []runtime.Object
			var vols []vol
			for i := range 20 {
				name := fmt.Sprintf("n%d", i)
				objs = append(objs, pvc(name, "pv-"+name))
				vols = append(vols, vol{Name: "hp" + name, Claim: name, AttachUID: attachUID})
			}
			for i := range tt.others {
				objs = append(objs, pvc(fmt.Sprintf("other%d", i), "pv"))
			}
			ta := newTestAgent(t, func(c *Config) { c.GrowFilesystems = false }, objs...)
			ta.addPods(t, launcherPod(), attachmentPod())
			ta.setVMI(t, vmiObject(vols...))
			if err := ta.reconcile(context.Background(), testKey); err != nil {
				t.Fatal(err)
			}
			lists, gets := ta.claimCalls("list"), ta.claimCalls("get")
			if lists != tt.lists || gets != tt.gets || ta.claims.len() != tt.wantInCached {
				t.Fatalf("%d lists, %d GETs, %d held; want %d, %d, %d", lists, gets, ta.claims.len(), tt.lists, tt.gets, tt.wantInCached)
			}
		})
	}
}

// TestClaimBeingDeletedIsNotRemembered: a claim being deleted still names
// its PV, but its name will soon hold another claim, so the next pass
// reads it again.
func TestClaimBeingDeletedIsNotRemembered(t *testing.T) {
	ta := standardAgent(t, func(c *Config) { c.GrowFilesystems = false })
	now := metav1.Now()
	c := pvc("c1", "pv-1")
	c.DeletionTimestamp, c.Finalizers = &now, []string{"kubernetes.io/pvc-protection"}
	ta.setClaim(t, c)
	ta.setVMI(t, vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: attachUID}))
	for range 2 {
		if err := ta.reconcile(context.Background(), testKey); err != nil {
			t.Fatal(err)
		}
	}
	if n, gets := ta.claims.len(), ta.claimCalls("get"); n != 0 || gets != 2 {
		t.Fatalf("a claim being deleted: %d held, %d GETs for two passes; want 0 and 2", n, gets)
	}
	if got := ta.engine.changing(); !slices.Equal(got, []string{"attach hp Filesystem attach-uid/pv-1"}) {
		t.Fatalf("calls = %v", got)
	}
}

// TestClaimNotFoundIsNotReadEveryPass: a VMI whose ready attachment pod
// names claims that do not exist costs their reads once, not on every
// pass: by a list of their namespace, which says they are missing as a
// GET would, or where the namespace is too large to list, one GET each,
// at most claimGetsPerPass a pass. They are asked for again only once
// their wait ran out, the wait doubling while they stay missing, and a
// namespace that can be listed is listed again then, not read by name (on
// the old code 50 claims cost 50 GETs at every expiry, and 3,000 a minute
// of the node's API budget). A claim created meanwhile is read for a new
// attachment pod at once.
func TestClaimNotFoundIsNotReadEveryPass(t *testing.T) {
	for _, tc := range []struct {
		name           string
		claims, others int
		// first and again are the claim requests of the first pass and
		// of the first after the wait (-1: not looked at); second those
		// of the pass right after the first.
		first, second, again int
	}{
		{"a namespace that can be listed", 50, 0, 2, 0, 2},
		{"a namespace too large to list", 50, 200, 51, 0, 51},
		{"more missing than a pass reads by name", 100, 300, 1 + claimGetsPerPass, 100 - claimGetsPerPass, -1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ta := notFoundAgent(t, tc.claims, tc.others)
			now := time.Now()
			ta.claims.now = func() time.Time { return now }
			pass := func() int {
				t.Helper()
				before := ta.claimCalls("get") + ta.claimCalls("list")
				_ = ta.reconcile(context.Background(), testKey)
				return ta.claimCalls("get") + ta.claimCalls("list") - before
			}
			if n := pass(); n != tc.first {
				t.Fatalf("the first pass made %d claim requests, want %d", n, tc.first)
			}
			if n := pass(); n != tc.second {
				t.Fatalf("the second pass made %d claim requests, want %d", n, tc.second)
			}
			for i := range 2 {
				if n := pass(); n != 0 {
					t.Fatalf("pass %d within the wait made %d claim requests, want 0", i+3, n)
				}
			}
			if tc.again < 0 {
				return
			}
			now = now.Add(absentFirst)
			if n := pass(); n != tc.again {
				t.Fatalf("the pass after the wait made %d claim requests, want %d", n, tc.again)
			}
			now = now.Add(absentFirst)
			if n := pass(); n != 0 {
				t.Fatalf("a pass within the doubled wait made %d claim requests, want 0", n)
			}
		})
	}
	ta := notFoundAgent(t, 50, 0)
	_ = ta.reconcile(context.Background(), testKey)
	// The claim appears, and a new attachment pod names it.
	ta.setClaim(t, kt.PVC("missing-0", "pv-0"))
	ta.addPods(t, attachmentPod(func(p *corev1.Pod) { p.UID = "attach-uid-2" }))
	ta.setVMI(t, vmiObject(vol{Name: "v0", Claim: "missing-0", AttachUID: "attach-uid-2"}))
	if err := ta.reconcile(context.Background(), testKey); err != nil {
		t.Fatalf("reconcile once the claim exists: %v", err)
	}
}

// notFoundAgent is an agent whose VMI names claims claims that do not
// exist, in a namespace that holds others more.
func notFoundAgent(t *testing.T, claims, others int) *testAgent {
	var objs []runtime.Object
	for i := range others {
		objs = append(objs, pvc(fmt.Sprintf("other%d", i), "pv"))
	}
	ta := newTestAgent(t, func(c *Config) { c.GrowFilesystems = false }, objs...)
	ta.addPods(t, launcherPod(), attachmentPod())
	var vols []vol
	for i := range claims {
		vols = append(vols, vol{Name: fmt.Sprintf("v%d", i), Claim: fmt.Sprintf("missing-%d", i), AttachUID: attachUID})
	}
	ta.setVMI(t, vmiObject(vols...))
	return ta
}
