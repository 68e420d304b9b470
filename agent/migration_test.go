// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package agent

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	k8stesting "k8s.io/client-go/testing"

	"github.com/hpmount/hpmount/kubevirt"
	kt "github.com/hpmount/hpmount/kubevirt/kubevirttest"
)

// migrationObserver records the migration events reported.
type migrationObserver struct {
	NopObserver
	mu     sync.Mutex
	events []string
}

var _ Observer = (*migrationObserver)(nil)

func (o *migrationObserver) Migration(event string, _ time.Duration) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.events = append(o.events, event)
}

func migratingObject(mut ...func(map[string]any)) *unstructured.Unstructured {
	return kt.Migrating(vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: attachUID}, vol{Name: "blk", Claim: "c2", AttachUID: attachUID, Mode: "Block"}), mut...)
}

// targetAgent is the agent of the migration's target node, with the
// target launcher and its attachment pod in its cache and the VMI in its
// migration target cache, as right after the handoff.
func targetAgent(t *testing.T) (*testAgent, *migrationObserver) {
	obs := &migrationObserver{}
	ta := newTestAgent(t, func(c *Config) {
		c.NodeName, c.Observer, c.ReportVolumeStatus, c.GrowFilesystems = kt.TargetNode, obs, true, false
	}, pvc("c1", "pv-1"), pvc("c2", "pv-2"))
	ta.addPods(t, kt.TargetLauncher(), kt.TargetAttachmentPod())
	ta.setTargetVMI(t, migratingObject())
	return ta, obs
}

func (ta *testAgent) setTargetVMI(t testing.TB, u *unstructured.Unstructured) {
	t.Helper()
	if err := ta.vmiTargetInformer.GetIndexer().Update(recordOf(t, u)); err != nil {
		t.Fatalf("set target vmi: %v", err)
	}
}

func (ta *testAgent) mustReconcile(t testing.TB) {
	t.Helper()
	if err := ta.reconcile(context.Background(), testKey); err != nil {
		t.Fatal(err)
	}
}

// TestMigrationTargetMounts: the target node mounts every hotplug volume
// into the target launcher from the target attachment pod, reports it
// once, and leaves status.volumeStatus to the source.
func TestMigrationTargetMounts(t *testing.T) {
	ta, obs := targetAgent(t)
	ta.mustReconcile(t)
	want := []string{"attach blk Block target-attach-uid/pv-2", "attach hp Filesystem target-attach-uid/pv-1"}
	if got := ta.engine.changing(); !slices.Equal(got, want) {
		t.Fatalf("calls = %v, want %v", got, want)
	}
	if ev := ta.events(); !hasEvent(ev, "Normal MigrationTargetReady All 2 hotplug volumes are mounted in migration target virt-launcher pod virt-launcher-vm1-target") {
		t.Fatalf("events = %v", ev)
	}
	if got := obs.events; !slices.Equal(got, []string{MigrationHandoff, MigrationTargetReady}) {
		t.Fatalf("migration events = %v", got)
	}
	if n := ta.status.queue.Len(); n != 0 {
		t.Fatalf("the target queued %d volumeStatus writes while the source owns them", n)
	}
	ta.engine.reset()
	ta.mustReconcile(t)
	if got, ev := mountCalls(ta.engine.changing()), ta.events(); len(got) != 0 || len(ev) != 0 {
		t.Fatalf("second pass: calls %v, events %v", got, ev)
	}
}

// TestMigrationTargetCleanedOnFailure: a failed or aborted migration
// leaves nothing of hpmount's in its target launcher, even while the pod
// lingers (kubevirt#17882), whether or not status.activePods still lists
// it. A target virt-handler's record names is left to virt-handler, whose
// Unmount removes it should the VMI come back, and the Event says so.
func TestMigrationTargetCleanedOnFailure(t *testing.T) {
	failed := func(ms map[string]any) { ms["failed"] = true }
	cleaned := []string{"detach target-launcher-uid blk", "detach target-launcher-uid hp"}
	tests := []struct {
		name string
		mut  func(map[string]any)
		// unlisted drops the target launcher from status.activePods;
		// recorded has virt-handler's record name its target hp.img.
		unlisted, recorded bool
		calls              []string
		event, step        string
	}{
		{name: "failed, still an active pod", mut: failed, calls: cleaned,
			event: "Normal MigrationTargetCleaned Migration migration-uid", step: MigrationTargetCleaned},
		{name: "aborted, no longer an active pod", mut: func(ms map[string]any) { ms["abortStatus"] = kubevirt.AbortSucceeded }, unlisted: true, calls: cleaned,
			event: "Normal MigrationTargetCleaned Migration migration-uid", step: MigrationTargetCleaned},
		{name: "failed, virt-handler's record names its target", mut: failed, recorded: true, calls: cleaned[:1],
			event: "Warning MigrationTargetLeft Migration migration-uid", step: MigrationTargetLeft},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ta, obs := targetAgent(t)
			ta.mustReconcile(t)
			ta.engine.reset()
			ta.events()
			u := migratingObject(tt.mut)
			if tt.unlisted {
				u.Object["status"].(map[string]any)["activePods"] = map[string]any{string(launcherUID): testNode}
			}
			ta.setTargetVMI(t, u)
			if tt.recorded {
				ta.engine.handler = map[types.UID]HandlerRecord{kt.VMIUID: {
					Volumes: map[types.UID]map[string]bool{kt.TargetLauncherUID: {"hp": true, "hp.img": true}}}}
			}
			ta.mustReconcile(t)
			if got := ta.engine.changing(); !slices.Equal(got, tt.calls) {
				t.Fatalf("calls = %v, want %v", got, tt.calls)
			}
			ev := ta.events()
			warnings := slices.ContainsFunc(ev, func(e string) bool { return strings.HasPrefix(e, "Warning") })
			if !hasEvent(ev, tt.event) || warnings != tt.recorded {
				t.Fatalf("events = %v, want %q and no other Warning", ev, tt.event)
			}
			if tt.recorded && !slices.ContainsFunc(ev, func(e string) bool { return strings.Contains(e, "volumes hp, which virt-handler bound") }) {
				t.Fatalf("events = %q, want the volume left named", ev)
			}
			if !slices.Contains(obs.events, tt.step) || slices.Contains(obs.events, MigrationTargetCleaned) && tt.recorded {
				t.Fatalf("migration events = %v, want %v", obs.events, tt.step)
			}
			ta.engine.reset()
			ta.mustReconcile(t)
			if got, ev := ta.engine.changing(), ta.events(); len(got) != 0 || len(ev) != 0 {
				t.Fatalf("after cleaning: calls %v, events %v", got, ev)
			}
		})
	}
}

// TestMigrationTargetKeepsMountsAfterSuccess: once the labels flip, the
// target node reads the VMI as its own and changes nothing.
func TestMigrationTargetKeepsMountsAfterSuccess(t *testing.T) {
	ta, _ := targetAgent(t)
	ta.mustReconcile(t)
	ta.engine.reset()
	u := migratingObject(func(ms map[string]any) { ms["completed"] = true })
	u.SetLabels(map[string]string{kubevirt.LabelNodeName: kt.TargetNode, kubevirt.LabelMigrationTargetNode: kt.TargetNode})
	status := u.Object["status"].(map[string]any)
	status["nodeName"], status["activePods"] = kt.TargetNode, map[string]any{string(kt.TargetLauncherUID): kt.TargetNode}
	for _, st := range status["volumeStatus"].([]any) {
		st.(map[string]any)["hotplugVolume"] = map[string]any{"attachPodName": "hp-volume-target", "attachPodUID": string(kt.TargetAttachUID)}
	}
	ta.setVMI(t, u)
	ta.mustReconcile(t)
	if got := mountCalls(ta.engine.changing()); len(got) != 0 {
		t.Fatalf("after success the target remounted: %v", got)
	}
}

// TestMigrationSourceCleansOnceLauncherStops: after the VMI left for its
// target the source keeps its launcher's mounts while the launcher runs,
// and cleans them once it stopped.
func TestMigrationSourceCleansOnceLauncherStops(t *testing.T) {
	obs := &migrationObserver{}
	ta := newTestAgent(t, func(c *Config) { c.Observer, c.GrowFilesystems = obs, false }, pvc("c1", "pv-1"), pvc("c2", "pv-2"))
	ta.addPods(t, launcherPod(), attachmentPod())
	u := migratingObject(func(ms map[string]any) { ms["completed"] = true })
	ta.setVMI(t, u)
	ta.mustReconcile(t)
	ta.engine.reset()
	if err := ta.vmiInformer.GetIndexer().Delete(u); err != nil {
		t.Fatal(err)
	}
	ta.mustReconcile(t)
	if got := ta.engine.changing(); len(got) != 0 {
		t.Fatalf("the source launcher still runs, yet: %v", got)
	}
	if _, ok := ta.states[testKey]; !ok {
		t.Fatal("the VMI was forgotten with its source launcher still mounted")
	}
	ta.addPods(t, launcherPod(func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }))
	ta.mustReconcile(t)
	if got, want := ta.engine.changing(), []string{"detach launcher-uid blk", "detach launcher-uid hp"}; !slices.Equal(got, want) {
		t.Fatalf("calls = %v, want %v", got, want)
	}
	if ev := ta.events(); !hasEvent(ev, "Normal MigrationSourceCleaned") || !slices.Contains(obs.events, MigrationSourceCleaned) {
		t.Fatalf("events = %v, migration events %v", ev, obs.events)
	}
	if _, ok := ta.states[testKey]; ok {
		t.Fatal("the VMI is still remembered after its source was cleaned")
	}
}

// TestStaleActivePodChosenOnce: a stale terminating launcher beside the
// live one is passed over with one LauncherChosen Event, not refused on
// every pass.
func TestStaleActivePodChosenOnce(t *testing.T) {
	const live = types.UID("live-launcher")
	now := metav1.Now()
	ta := newTestAgent(t, func(c *Config) { c.GrowFilesystems = false }, pvc("c1", "pv-1"))
	ta.addPods(t,
		launcherPod(func(p *corev1.Pod) { p.DeletionTimestamp, p.Status.Phase = &now, corev1.PodRunning }),
		launcherPod(func(p *corev1.Pod) { p.UID, p.Name, p.Status.Phase = live, "virt-launcher-vm1-live", corev1.PodRunning }),
		attachmentPod(func(p *corev1.Pod) { p.OwnerReferences[0].UID = live }))
	u := vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: attachUID})
	u.Object["status"].(map[string]any)["activePods"] = map[string]any{string(launcherUID): testNode, string(live): testNode}
	ta.setVMI(t, u)
	for pass := range 3 {
		if pass == 1 {
			ta.engine.reset()
		}
		ta.mustReconcile(t)
		ev := ta.events()
		if hasEvent(ev, "Warning HotplugRefused") {
			t.Fatalf("pass %d refused: %v", pass, ev)
		}
		if chosen := hasEvent(ev, "Normal LauncherChosen virt-launcher pod virt-launcher-vm1-live (Running) chosen over virt-launcher-vm1-abcde (Running, terminating)"); chosen != (pass == 0) {
			t.Fatalf("pass %d: events %v", pass, ev)
		}
	}
	if got := ta.engine.calls; slices.ContainsFunc(got, func(c string) bool { return c == "attach hp Filesystem attach-uid/pv-1" }) {
		t.Fatalf("attached again on a later pass: %v", got)
	}
	if _, ok := ta.engine.observed[live]["hp"]; !ok {
		t.Fatalf("nothing attached to the live launcher: %v", ta.engine.observed)
	}
}

// mountCalls keeps the attach and detach calls: a pass after an attach
// also runs growth checks.
func mountCalls(calls []string) []string {
	var out []string
	for _, c := range calls {
		if strings.HasPrefix(c, "attach ") || strings.HasPrefix(c, "detach ") {
			out = append(out, c)
		}
	}
	return out
}

// completedOnTarget is the VMI of a migration to kt.TargetNode once the
// handoff completed: its node label, status.nodeName and attachment pod
// name the target, and the target label is gone.
func completedOnTarget() *unstructured.Unstructured {
	u := migratingObject(func(ms map[string]any) { ms["completed"] = true })
	u.SetLabels(map[string]string{kubevirt.LabelNodeName: kt.TargetNode})
	status := u.Object["status"].(map[string]any)
	status["nodeName"], status["activePods"] = kt.TargetNode, map[string]any{string(kt.TargetLauncherUID): kt.TargetNode}
	for _, st := range status["volumeStatus"].([]any) {
		st.(map[string]any)["hotplugVolume"] = map[string]any{"attachPodName": "hp-volume-target", "attachPodUID": string(kt.TargetAttachUID)}
	}
	return u
}

// TestHandoffInEitherOrder: KubeVirt ends a migration in separate updates
// (the node label moves to the target, later the target label goes), and
// the target node sees them through two informers in either order. When
// the target informer's delete comes first the VMI is in neither cache for
// a while: that absence alone never detaches from the launcher that now
// runs the VM. A live read confirms the VMI still names this node, and the
// node informer's add then changes nothing.
func TestHandoffInEitherOrder(t *testing.T) {
	for _, tc := range []struct {
		name                    string
		deleteFirst, labelFirst bool
	}{
		{"target delete before node add", true, false},
		{"node add before target delete", false, false},
		{"target label gone before node label moved", true, true},
	} {
		name, deleteFirst, labelFirst := tc.name, tc.deleteFirst, tc.labelFirst
		t.Run(name, func(t *testing.T) {
			ta, _ := targetAgent(t)
			ta.mustReconcile(t)
			live := completedOnTarget()
			if labelFirst {
				// The target label went first: nodeName still names the
				// source, but the migration completed and the VM runs here.
				live.SetLabels(map[string]string{kubevirt.LabelNodeName: kt.Node})
				live.Object["status"].(map[string]any)["nodeName"] = kt.Node
			}
			if _, err := ta.dyn.Resource(kubevirt.VMIResource).Namespace(testNS).Create(context.Background(), live, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
			ta.engine.reset()
			steps := []func(){
				func() {
					if err := ta.vmiTargetInformer.GetIndexer().Delete(migratingObject(func(ms map[string]any) { ms["completed"] = true })); err != nil {
						t.Fatal(err)
					}
				},
				func() { ta.setVMI(t, completedOnTarget()) },
			}
			if !deleteFirst {
				slices.Reverse(steps)
			}
			for i, step := range steps {
				step()
				ta.mustReconcile(t)
				if got := mountCalls(ta.engine.changing()); len(got) != 0 {
					t.Fatalf("after step %d the running VM lost its disks: %v", i, got)
				}
				if _, ok := ta.states[testKey]; !ok {
					t.Fatalf("after step %d the VMI was forgotten", i)
				}
			}
		})
	}
}

// goneObserver records the confirmations of a VMI's departure.
type goneObserver struct {
	NopObserver
	mu     sync.Mutex
	checks []string
}

var _ Observer = (*goneObserver)(nil)

func (o *goneObserver) GoneCheck(result string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.checks = append(o.checks, result)
}

// TestGoneIsConfirmed: a VMI missing from the caches is detached only when
// one live read confirms it left: not found, replaced by another VMI of
// the name, or naming another node. A VMI that still names this node, or
// an API server that cannot answer, detaches nothing and keeps the VMI.
func TestGoneIsConfirmed(t *testing.T) {
	elsewhere := vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: attachUID})
	elsewhere.SetLabels(map[string]string{kubevirt.LabelNodeName: "node9"})
	elsewhere.Object["status"].(map[string]any)["nodeName"] = "node9"
	replaced := vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: attachUID})
	replaced.SetUID("another-uid")
	tests := []struct {
		name   string
		live   *unstructured.Unstructured
		getErr bool
		want   string
		detach bool
	}{
		{name: "not found", want: GoneConfirmed, detach: true},
		{name: "replaced", live: replaced, want: GoneReplaced, detach: true},
		{name: "on another node", live: elsewhere, want: GoneElsewhere, detach: true},
		{name: "still on this node", live: vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: attachUID}), want: GoneStillHere},
		{name: "api server fails", getErr: true, want: GoneUnknown},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			obs := &goneObserver{}
			ta := newTestAgent(t, func(c *Config) { c.Observer, c.GrowFilesystems = obs, false }, pvc("c1", "pv-1"))
			ta.addPods(t, launcherPod(), attachmentPod())
			u := vmiObject(vol{Name: "hp", Claim: "c1", AttachUID: attachUID})
			ta.setVMI(t, u)
			ta.mustReconcile(t)
			if tt.live != nil {
				if _, err := ta.dyn.Resource(kubevirt.VMIResource).Namespace(testNS).Create(context.Background(), tt.live, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			if tt.getErr {
				ta.dyn.PrependReactor("get", "virtualmachineinstances", func(k8stesting.Action) (bool, runtime.Object, error) {
					return true, nil, apierrors.NewInternalError(errors.New("etcd leader changed"))
				})
			}
			if err := ta.vmiInformer.GetIndexer().Delete(u); err != nil {
				t.Fatal(err)
			}
			ta.engine.reset()
			ta.mustReconcile(t)
			detached := slices.Equal(ta.engine.changing(), []string{"detach launcher-uid hp"})
			if detached != tt.detach || !tt.detach && len(ta.engine.changing()) != 0 {
				t.Fatalf("calls = %v, want a detach: %v", ta.engine.changing(), tt.detach)
			}
			if _, kept := ta.states[testKey]; kept == tt.detach {
				t.Fatalf("vmi remembered: %v, want %v", kept, !tt.detach)
			}
			if !slices.Equal(obs.checks, []string{tt.want}) {
				t.Fatalf("checks = %v, want [%s]", obs.checks, tt.want)
			}
		})
	}
}
