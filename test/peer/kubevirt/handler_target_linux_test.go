// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package peer

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/mock/gomock"
	"golang.org/x/sys/unix"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	v1 "kubevirt.io/api/core/v1"
	cmdv1 "kubevirt.io/kubevirt/pkg/handler-launcher-com/cmd/v1"
	virthandler "kubevirt.io/kubevirt/pkg/virt-handler"
	cmdclient "kubevirt.io/kubevirt/pkg/virt-handler/cmd-client"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/api"

	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/outcome"
)

// newMigrationTargetController is virt-handler's migration-target
// controller on the VM controller's informers and launcher clients, with
// the migration proxy, network and capabilities stubbed: the migration's
// data path is not hotplug's, and this node has no second one to migrate
// from. Its signature is the same at v1.7.0 and v1.8.4.
func newMigrationTargetController(d vmControllerDeps) (*virthandler.MigrationTargetController, error) {
	return virthandler.NewMigrationTargetController(d.recorder, d.client, nodeName, d.privateDir, podsDir, "127.0.0.1",
		d.launchers, d.vmis, d.domains, d.config, d.isolation, d.migrationProxy, "/proc/%d/root/var/run",
		nil, noNetConf{}, noNetStat{}, nil, nil)
}

// expectMigrationTarget is virt-launcher's side of a migration target:
// SyncMigrationTarget has the target's QEMU open the hotplugged disks
// whose targets are there (as QEMU started for an incoming migration
// does), SignalTargetPodCleanup ends that QEMU (the target pod of a failed
// migration exits), and FinalizeVirtualMachineMigration does nothing a
// hotplugged disk sees.
func expectMigrationTarget(client *cmdclient.MockLauncherClient, h *kvHandler) {
	client.EXPECT().SyncMigrationTarget(gomock.Any(), gomock.Any()).DoAndReturn(
		func(vmi *v1.VirtualMachineInstance, o *cmdv1.VirtualMachineOptions) error {
			return h.launcher.sync(vmi, o)
		}).AnyTimes()
	client.EXPECT().SignalTargetPodCleanup(gomock.Any()).DoAndReturn(func(*v1.VirtualMachineInstance) error {
		h.launcher.exit()
		return nil
	}).AnyTimes()
	client.EXPECT().FinalizeVirtualMachineMigration(gomock.Any(), gomock.Any()).Return(nil).AnyTimes()
	// A migration's source: its QEMU has handed the guest over and exits.
	client.EXPECT().DeleteDomain(gomock.Any()).DoAndReturn(func(*v1.VirtualMachineInstance) error {
		h.launcher.exit()
		return nil
	}).AnyTimes()
}

// noMigrationProxy stands in for virt-handler's migration proxies, which
// listen on every address of the node: it reports one target port per
// VMI and opens nothing.
type noMigrationProxy struct{ targets map[string]bool }

func (p *noMigrationProxy) StartTargetListener(key string, _ []string) error {
	if p.targets == nil {
		p.targets = map[string]bool{}
	}
	p.targets[key] = true
	return nil
}

func (p *noMigrationProxy) GetTargetListenerPorts(key string) map[string]int {
	if !p.targets[key] {
		return nil
	}
	return map[string]int{"49152": 0}
}

func (p *noMigrationProxy) StopTargetListener(key string) { delete(p.targets, key) }
func (p *noMigrationProxy) StartSourceListener(string, string, map[string]int, string) error {
	return nil
}
func (p *noMigrationProxy) GetSourceListenerFiles(string) []string { return nil }
func (p *noMigrationProxy) StopSourceListener(string)              {}
func (p *noMigrationProxy) OpenListenerCount() int                 { return len(p.targets) }
func (p *noMigrationProxy) InitiateGracefulShutdown()              {}

// syncTarget is one sync of the VMI by virt-handler's migration-target
// controller, with sync's error check.
func (h *kvHandler) syncTarget(t *testing.T) error {
	t.Helper()
	return h.run(t, h.target.Execute, h.targets)
}

// TestVirtHandlerMigrationAgain runs, on a migration's target node, virt-
// handler's own migration-target and VM controllers beside hpmount
// through a failed migration to the node and a second migration of the
// VMI to it that succeeds; the source is on another node, as in
// production. Disks are opened by the target launchers' QEMUs. Which
// mounter binds the first target's volumes first decides what virt-
// handler's record keeps (it records only the binds it makes):
//
//   - hpmount first: virt-handler records nothing; after the failure
//     hpmount empties the abandoned launcher, the kubelet removes the pod,
//     and every sync of the second migration succeeds.
//   - virt-handler first: its record names the first launcher's targets,
//     which its cleanup leaves there (kubevirt#17882), and hpmount leaves
//     them to it. What follows is what KubeVirt does alone
//     (TestKnown17882MigrationAgain): a Filesystem bind keeps the kubelet
//     from removing the pod until the second migration's Unmount removes
//     it, with no error; a Block node does not, the kubelet removes the
//     pod, and virt-handler's VM controller fails every sync after the
//     second migration at the recorded target that is gone.
func TestVirtHandlerMigrationAgain(t *testing.T) {
	testutil.RequiresRoot(t)
	virtHandlerMigrationAgain(t, "ma1")
}

// TestVirtHandlerMigrationAgainV2 is TestVirtHandlerMigrationAgain on a
// cgroup v2 node.
func TestVirtHandlerMigrationAgainV2(t *testing.T) {
	testutil.RequiresRoot(t)
	if !inCgroupV2Node {
		runInCgroupV2Node(t)
		return
	}
	virtHandlerMigrationAgain(t, "ma2")
}

func virtHandlerMigrationAgain(t *testing.T, prefix string) {
	ext := peerVolume{name: "ext", mode: kubevirt.Filesystem, fstype: "ext4"}
	blk := peerVolume{name: "blk", mode: kubevirt.Block}
	for _, c := range []struct {
		name, first string
		vols        []peerVolume
		// left is whether hpmount leaves the abandoned launcher's
		// volumes to virt-handler, held whether the bind keeps the
		// kubelet from removing that pod, and fails whether virt-
		// handler's syncs fail after the second migration.
		left, held, fails bool
	}{
		{"hpmount first", "hpmount", []peerVolume{ext, blk}, false, false, false},
		{"virt-handler first, filesystem", "virt-handler", []peerVolume{ext}, true, true, false},
		{"virt-handler first, block", "virt-handler", []peerVolume{blk}, true, false, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			n := newCoNode(t, prefix+c.first[:1]+c.vols[0].name[:1], c.vols)
			h := newKVHandler(t, n)
			n.handler = h
			r := &targetRun{t: t, n: n, h: h}
			l1 := n.launcher
			h.startTarget(t, "mig1")
			r.prepare("first migration", c.first)
			h.update(t, failMigration)
			r.target("first migration failed")
			if held := r.abandon(l1, c.left); held != c.held {
				t.Errorf("the abandoned launcher's pod held by a bind: %v, want %v", held, c.held)
			}

			l2, a2 := types.UID(n.prefix+"-l2"), types.UID(n.prefix+"-a2")
			r.newTarget(l2, a2)
			h.update(t, func(vmi *v1.VirtualMachineInstance) { migrateTo(vmi, "mig2", l2, a2) })
			r.prepare("second migration", "hpmount")
			r.complete(l2, a2)
			err := h.sync(t)
			t.Logf("after the second migration: virt-handler's VM controller: %v; its record: %s", err, n.kvRecord(t))
			if (err != nil) != c.fails {
				t.Errorf("virt-handler's sync after the second migration: %v, want an error: %v", err, c.fails)
			}
			if err != nil && (!strings.Contains(err.Error(), string(l1)) || !strings.Contains(err.Error(), "no such file or directory")) {
				t.Errorf("virt-handler's sync failed otherwise than at the first launcher's gone target: %v", err)
			}
			if c.held {
				r.hpmount("second migration done, hpmount")
				if err := deletePodDir(l1); err != nil {
					t.Errorf("the kubelet's retry of the abandoned launcher's teardown: %v", err)
				}
				n.gone = nil
			}
			if len(h.launcher.refused) > 0 {
				t.Errorf("QEMU's opens refused: %q", h.launcher.refused)
			}
		})
	}
}

// targetRun drives one target node through migrations.
type targetRun struct {
	t *testing.T
	n *coNode
	h *kvHandler
}

// prepare has hpmount and virt-handler's migration-target controller
// prepare the target, first one then the other, and checks that the
// target's QEMU opened every disk.
func (r *targetRun) prepare(step, first string) {
	r.t.Helper()
	if first == "hpmount" {
		r.hpmount(step + ", hpmount")
		r.target(step + ", virt-handler")
	} else {
		r.target(step + ", virt-handler")
		r.hpmount(step + ", hpmount")
	}
	r.target(step + ", virt-handler again")
	if got := len(r.h.launcher.qemu.held); got != len(r.n.vols) || len(r.h.launcher.refused) > 0 {
		r.t.Fatalf("%s: the target's QEMU holds %d disks, refused %q", step, got, r.h.launcher.refused)
	}
}

// target is one sync of virt-handler's migration-target controller,
// which must succeed.
func (r *targetRun) target(step string) {
	r.t.Helper()
	if err := r.h.syncTarget(r.t); err != nil {
		r.t.Fatalf("%s: %v", step, err)
	}
	r.t.Logf("%s: virt-handler's record: %s", step, r.n.kvRecord(r.t))
}

// hpmount is one pass of hpmount's agent, which must have no error.
func (r *targetRun) hpmount(step string) map[string]string {
	r.t.Helper()
	out := r.n.hpmountSync(r.t, "sync")
	if len(r.n.hpErrs) > 0 {
		r.t.Fatalf("%s: hpmount's errors: %q", step, r.n.hpErrs)
	}
	r.t.Logf("%s: %v", step, out)
	return out
}

// abandon is the failed migration's end on this node: hpmount empties the
// abandoned target launcher, but for the targets virt-handler's record
// names (left, all of them then), and the kubelet tries to delete its pod.
// held reports that the teardown failed at a bind left there; the pod
// then lingers, terminated, and hpmount looks at it again.
func (r *targetRun) abandon(l types.UID, left bool) (held bool) {
	r.t.Helper()
	want := "detach removed"
	if left {
		want = "detach " + string(outcome.LeftToHandler)
	}
	r.n.launcher, r.n.gone = "", []types.UID{l}
	for name, o := range r.hpmount("failed migration, hpmount") {
		if o != want {
			r.t.Errorf("hpmount's detach of %s from the abandoned launcher: %q, want %q", name, o, want)
		}
	}
	r.n.launchers[l].stop()
	err := deletePodDir(l)
	r.t.Logf("the kubelet's teardown of the abandoned launcher: %v", err)
	if err != nil && !errors.Is(err, unix.EBUSY) {
		r.t.Fatalf("the kubelet's teardown of the abandoned launcher: %v", err)
	}
	if err == nil {
		r.n.gone = nil
	}
	return err != nil
}

// newTarget starts the next target launcher and its attachment pod.
func (r *targetRun) newTarget(l, attach types.UID) {
	r.t.Helper()
	n := r.n
	n.addLauncher(r.t, l)
	n.addAttachPod(r.t, attach)
	n.launcher, n.attach, n.launcherPod = l, attach, n.launchers[l]
	n.attachPodOf[l] = attach
	n.computeCgroup = filepath.Join(n.cgroupRoot, "kubepods", "pod"+string(l), n.computeID(l))
	r.h.launcher = newFakeLauncher(r.t, n.launcherPod, n.computeCgroup)
}

// complete is a successful migration's end, as virt-controller and the
// launchers write it: the VMI runs in launcher l from attachment pod
// attach on this node, whose domain is running; then virt-handler's
// migration-target controller finalizes it.
func (r *targetRun) complete(l, attach types.UID) {
	r.t.Helper()
	r.h.update(r.t, func(vmi *v1.VirtualMachineInstance) {
		now := metav1.NewTime(time.Now())
		vmi.Labels[v1.NodeNameLabel], vmi.Status.NodeName = nodeName, nodeName
		vmi.Status.ActivePods = map[types.UID]string{l: nodeName}
		for i := range vmi.Status.VolumeStatus {
			vmi.Status.VolumeStatus[i].HotplugVolume.AttachPodUID = attach
		}
		ms := vmi.Status.MigrationState
		ms.StartTimestamp, ms.EndTimestamp, ms.Completed = &now, &now, true
	})
	dom := api.NewMinimalDomainWithNS("ns", r.n.vmi().Name)
	dom.Spec.Metadata.KubeVirt.UID = r.n.vmi().UID
	dom.Status.Status = api.Running
	r.h.launcher.domain = dom.DeepCopy()
	r.h.domSrc.Add(dom)
	r.h.waitFor(r.t, r.h.domains, dom.ResourceVersion)
	r.target("second migration done")
}

// startTarget creates the VMI as it is when a migration to this node
// begins: running on another node, with status entries for every hotplug
// volume (attached there, ready), the target launcher and attachment pod
// here.
func (h *kvHandler) startTarget(t *testing.T, migration types.UID) {
	t.Helper()
	vmi := h.n.vmi()
	vmi.Status.Phase = v1.Running
	vmi.Annotations = webhookAnnotations()
	vmi.Labels[v1.NodeNameLabel], vmi.Status.NodeName = "node-src", "node-src"
	for i := range vmi.Status.VolumeStatus {
		st := &vmi.Status.VolumeStatus[i]
		st.Phase, st.Target = v1.VolumeReady, fmt.Sprintf("sd%c", 'a'+i)
		st.HotplugVolume.AttachPodUID = "source-attach"
	}
	migrateTo(vmi, migration, h.n.launcher, h.n.attach)
	h.create(t, vmi)
}

// migrateTo has vmi migrate to launcher l on this node, from attachment
// pod attach, as virt-controller writes it once both target pods run.
func migrateTo(vmi *v1.VirtualMachineInstance, migration, l, attach types.UID) {
	vmi.Labels[v1.MigrationTargetNodeNameLabel] = nodeName
	vmi.Status.ActivePods = map[types.UID]string{"source-launcher": "node-src", l: nodeName}
	vmi.Status.MigrationState = &v1.VirtualMachineInstanceMigrationState{MigrationUID: migration,
		SourceNode: "node-src", SourcePod: "launcher-src", TargetNode: nodeName, TargetPod: "launcher-" + string(l),
		TargetAttachmentPodUID: attach}
}

// failMigration is virt-controller's record of a failed migration.
func failMigration(vmi *v1.VirtualMachineInstance) {
	now := metav1.NewTime(time.Now())
	ms := vmi.Status.MigrationState
	ms.StartTimestamp, ms.EndTimestamp, ms.Completed, ms.Failed = &now, &now, true, true
}
