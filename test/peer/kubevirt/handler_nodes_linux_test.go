// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package peer

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/mock/gomock"
	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubecli"
	virthandler "kubevirt.io/kubevirt/pkg/virt-handler"
	cmdclient "kubevirt.io/kubevirt/pkg/virt-handler/cmd-client"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/api"
	"kubevirt.io/kubevirt/pkg/virt-operator/resource/generate/components"

	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/outcome"
	"github.com/hpmount/hpmount/test/cluster"
)

// newMigrationSourceController is virt-handler's migration-source
// controller on the VM controller's informers and launcher clients. Its
// signature is the same at v1.7.0 and v1.8.4.
func newMigrationSourceController(d vmControllerDeps) (*virthandler.MigrationSourceController, error) {
	return virthandler.NewMigrationSourceController(d.recorder, d.client, nodeName, d.launchers, d.vmis, d.domains,
		d.config, d.isolation, d.migrationProxy, "/proc/%d/root/var/run", noNetStat{}, nil)
}

// expectMigrationSource is virt-launcher's side of a migration's source:
// MigrateVirtualMachine starts the migration, which libvirt records in the
// domain's metadata.
func expectMigrationSource(client *cmdclient.MockLauncherClient, h *kvHandler) {
	client.EXPECT().MigrateVirtualMachine(gomock.Any(), gomock.Any()).DoAndReturn(
		func(vmi *v1.VirtualMachineInstance, _ *cmdclient.MigrationOptions) error {
			h.launcher.mu.Lock()
			defer h.launcher.mu.Unlock()
			h.launcher.domain.Spec.Metadata.KubeVirt.Migration = &api.MigrationMetadata{
				UID: vmi.Status.MigrationState.MigrationUID, StartTimestamp: now()}
			return nil
		}).AnyTimes()
	client.EXPECT().CancelVirtualMachineMigration(gomock.Any()).Return(nil).AnyTimes()
}

// The second node's environment: the case it runs (twoNodeCase, JSON).
const nodeCaseEnv = "HPMOUNT_PEER_NODE_CASE"

// otherNode is the name of the migration's target node.
const otherNode = "node-b"

// TestVirtHandlerTwoNodes migrates a VMI with hotplugged volumes between
// two nodes, each with its own virt-handler (its VM, migration-source and
// migration-target controllers, KubeVirt's informers and clients) and its
// own hpmount, both on one real kube-apiserver with KubeVirt's VMI CRD: a
// failed migration to the second node, then a second migration of the
// VMI to it that succeeds. Each node's launchers open their disks with a
// real QEMU. The second node is a second PID and mount namespace, its test
// binary driven step by step from the first (remoteNode); the test plays
// virt-controller, writing each migration's state as it does.
//
// Every virt-handler sync on either node must succeed, hpmount must have
// no error, and each launcher's QEMU must open every disk. Which mounter
// prepares the failed target first decides what virt-handler's record
// keeps there, as on one node (TestVirtHandlerMigrationAgain); the case
// of a Block volume bound first by virt-handler ends in KubeVirt's own
// failure (kubevirt#17882, TestKnown17882MigrationAgain) and is not run.
func TestVirtHandlerTwoNodes(t *testing.T) {
	testutil.RequiresRoot(t)
	if inOtherNode {
		serveNodeSteps(t)
		return
	}
	virtHandlerTwoNodes(t, "tn1")
}

// TestVirtHandlerTwoNodesV2 is TestVirtHandlerTwoNodes on cgroup v2
// nodes.
func TestVirtHandlerTwoNodesV2(t *testing.T) {
	testutil.RequiresRoot(t)
	switch {
	case inOtherNode:
		serveNodeSteps(t)
		return
	case !inCgroupV2Node:
		runInCgroupV2Node(t)
		return
	}
	virtHandlerTwoNodes(t, "tn2")
}

// twoNodeCase is one case of TestVirtHandlerTwoNodes, as the second node
// is told it.
type twoNodeCase struct {
	Name, Prefix, First string
	Vols                []twoNodeVolume
	// Left is whether hpmount leaves the failed target's volumes to
	// virt-handler, Held whether that keeps the kubelet from removing
	// the failed target's pod.
	Left, Held bool
	Kubeconfig string
}

type twoNodeVolume struct{ Name, Mode, FSType string }

func (c twoNodeCase) volumes() []peerVolume {
	var vols []peerVolume
	for _, v := range c.Vols {
		vols = append(vols, peerVolume{name: v.Name, mode: kubevirt.VolumeMode(v.Mode), fstype: v.FSType})
	}
	return vols
}

func virtHandlerTwoNodes(t *testing.T, prefix string) {
	kubeconfig := startVMIControlPlane(t)
	ext := twoNodeVolume{Name: "ext", Mode: string(kubevirt.Filesystem), FSType: "ext4"}
	blk := twoNodeVolume{Name: "blk", Mode: string(kubevirt.Block)}
	for i, c := range []twoNodeCase{
		{Name: "hpmount first", First: "hpmount", Vols: []twoNodeVolume{ext, blk}},
		{Name: "virt-handler first, filesystem", First: "virt-handler", Vols: []twoNodeVolume{ext}, Left: true, Held: true},
	} {
		t.Run(c.Name, func(t *testing.T) {
			c.Prefix, c.Kubeconfig = fmt.Sprintf("%s%d", prefix, i), kubeconfig
			r := &twoNodeRun{t: t, c: c}
			cfg := loadConfig(t, kubeconfig)
			t.Cleanup(func() { deleteVMI(t, cfg, c.Prefix) })
			r.a = newNodeSide(t, c, cfg)
			r.b = startOtherNode(t, c, r.a.n.bin)
			r.run()
		})
	}
}

// startVMIControlPlane starts etcd and kube-apiserver, installs KubeVirt's
// own VMI CRD and the test's namespace, and returns an admin kubeconfig
// that both nodes read.
func startVMIControlPlane(t *testing.T) string {
	t.Helper()
	cp := cluster.Start(t)
	kubeconfig := t.TempDir() + "/kubeconfig"
	must(t, cluster.WriteKubeconfig(kubeconfig, cp.AdminConfig()))
	client, err := kubecli.GetKubevirtClientFromRESTConfig(cp.AdminConfig())
	must(t, err)
	ctx := context.Background()
	crd, err := components.NewVirtualMachineInstanceCrd()
	must(t, err)
	_, err = client.ExtensionsClient().ApiextensionsV1().CustomResourceDefinitions().Create(ctx, crd, metav1.CreateOptions{})
	must(t, err)
	_, err = client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns"}}, metav1.CreateOptions{})
	must(t, err)
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := client.VirtualMachineInstance("ns").List(ctx, metav1.ListOptions{})
		return err == nil, nil
	})
	must(t, err)
	return kubeconfig
}

// deleteVMI deletes the case's VMI once both nodes are done with it, so
// that the next case's nodes do not find it.
func deleteVMI(t *testing.T, cfg *rest.Config, prefix string) {
	client, err := kubecli.GetKubevirtClientFromRESTConfig(cfg)
	must(t, err)
	err = client.VirtualMachineInstance("ns").Delete(context.Background(), "vm-"+prefix, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		t.Errorf("delete the VMI: %v", err)
	}
}

func loadConfig(t *testing.T, kubeconfig string) *rest.Config {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	must(t, err)
	return cfg
}

// nodeSide is one node of the pair: its pods, virt-handler and hpmount,
// and the steps the test runs there (step).
type nodeSide struct {
	n *coNode
	h *kvHandler
}

func newNodeSide(t *testing.T, c twoNodeCase, cfg *rest.Config) *nodeSide {
	t.Helper()
	n := newCoNode(t, c.Prefix, c.volumes())
	h := newKVHandlerOn(t, n, cfg)
	n.handler = h
	return &nodeSide{n: n, h: h}
}

// step runs one step on the node and says what came of it: "" for a
// sync without an error, else its error; hpmount's outcomes; what QEMU
// opened.
func (s *nodeSide) step(t *testing.T, name string, args ...string) string {
	t.Helper()
	n, h := s.n, s.h
	switch name {
	case "create": // the VM runs on this node
		h.start(t)
	case "vm":
		return errText(h.sync(t))
	case "source":
		return errText(h.syncSource(t))
	case "target":
		return errText(h.syncTarget(t))
	case "hpmount":
		return s.hpmount(t)
	case "opens": // the launcher's QEMU opens each attached disk again
		l := h.launcher
		l.mu.Lock()
		defer l.mu.Unlock()
		l.open(l.domain.Spec.Devices.Disks)
		return fmt.Sprintf("%d held, refused %q", len(l.qemu.held), l.refused)
	case "launch": // a migration's target launcher and attachment pod
		(&targetRun{t: t, n: n, h: h}).newTarget(types.UID(args[0]), types.UID(args[1]))
	case "domain": // the launcher's domain runs the VM
		h.domainRunning(t)
	case "migrated": // the source's domain has handed the VM over
		dom := h.launcher.domain
		if dom.Spec.Metadata.KubeVirt.Migration == nil {
			return "the source's migration never started"
		}
		dom.Spec.Metadata.KubeVirt.Migration.EndTimestamp = now()
		dom.Status.Status, dom.Status.Reason = api.Shutoff, api.ReasonMigrated
		h.feedBack(t)
	case "exit": // the launcher's pod stops, its QEMU first
		l := n.launcher
		h.launcher.exit()
		n.launcher, n.gone = "", []types.UID{l}
		n.launchers[l].stop()
	case "teardown": // the kubelet removes the pod's directory
		err := deletePodDir(types.UID(args[0]))
		if err == nil {
			n.gone = nil
		}
		return errText(err)
	case "record":
		return n.kvRecord(t)
	default:
		t.Fatalf("no step %q", name)
	}
	return ""
}

// hpmount is one pass of hpmount's agent; it returns each volume's
// outcome, "name=outcome", sorted.
func (s *nodeSide) hpmount(t *testing.T) string {
	t.Helper()
	var out []string
	for name, o := range s.n.hpmountSync(t, "sync") {
		out = append(out, name+"="+o)
	}
	s.n.hpErrs = nil
	slices.Sort(out)
	return strings.Join(out, outcomeSep)
}

// outcomeSep separates hpmount's outcomes in a step's result.
const outcomeSep = "; "

func errText(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

// stepper runs steps on a node: the test's own (nodeSide) or the second
// node (remoteNode).
type stepper interface {
	step(t *testing.T, name string, args ...string) string
}

// remoteNode is the second node: the test binary again, as PID 1 of PID
// and mount namespaces of its own nested in the first node's, running
// serveNodeSteps. Steps go to it on one pipe and their results come back
// on another, one JSON line each.
type remoteNode struct {
	steps   *os.File
	replies *bufio.Reader
	out     *lockedBuffer
}

func startOtherNode(t *testing.T, c twoNodeCase, side string) *remoteNode {
	t.Helper()
	stepsR, stepsW, err := os.Pipe()
	must(t, err)
	repliesR, repliesW, err := os.Pipe()
	must(t, err)
	spec, err := json.Marshal(c)
	must(t, err)
	top, _, _ := strings.Cut(t.Name(), "/")
	cmd := exec.Command("/proc/self/exe", "-test.run=^"+top+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), otherNodeEnv+"="+otherNode, nodeCaseEnv+"="+string(spec), sideEnv+"="+side)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWPID, Unshareflags: syscall.CLONE_NEWNS}
	cmd.ExtraFiles = []*os.File{stepsR, repliesW}
	r := &remoteNode{steps: stepsW, replies: bufio.NewReader(repliesR), out: &lockedBuffer{}}
	cmd.Stdout, cmd.Stderr = r.out, r.out
	must(t, cmd.Start())
	stepsR.Close()
	repliesW.Close()
	t.Cleanup(func() {
		stepsW.Close()
		err := cmd.Wait()
		t.Logf("%s:\n%s", otherNode, r.out.take())
		if err != nil {
			t.Errorf("%s: %v", otherNode, err)
		}
	})
	if got := r.reply(t, "its start"); got != "ready" {
		t.Fatalf("%s: %q", otherNode, got)
	}
	return r
}

func (r *remoteNode) step(t *testing.T, name string, args ...string) string {
	t.Helper()
	req, err := json.Marshal(append([]string{name}, args...))
	must(t, err)
	_, err = r.steps.Write(append(req, '\n'))
	must(t, err)
	return r.reply(t, "step "+name)
}

// reply is the second node's next result.
func (r *remoteNode) reply(t *testing.T, what string) string {
	t.Helper()
	line, err := r.replies.ReadBytes('\n')
	if err != nil {
		t.Fatalf("%s stopped at %s: %v; it printed:\n%s", otherNode, what, err, r.out.take())
	}
	var res string
	must(t, json.Unmarshal(line, &res))
	return res
}

// serveNodeSteps is the second node's side: it makes the node the first
// one described, says "ready", and runs each step the first one sends.
func serveNodeSteps(t *testing.T) {
	var c twoNodeCase
	must(t, json.Unmarshal([]byte(os.Getenv(nodeCaseEnv)), &c))
	// The pods and tools it starts must not hold the pipes.
	unix.CloseOnExec(3)
	unix.CloseOnExec(4)
	steps, replies := bufio.NewScanner(os.NewFile(3, "steps")), json.NewEncoder(os.NewFile(4, "replies"))
	s := newNodeSide(t, c, loadConfig(t, c.Kubeconfig))
	must(t, replies.Encode("ready"))
	for steps.Scan() {
		var req []string
		must(t, json.Unmarshal(steps.Bytes(), &req))
		must(t, replies.Encode(s.step(t, req[0], req[1:]...)))
	}
}

// twoNodeRun drives one case on the two nodes, a the VMI's first node and
// b the migrations' target.
type twoNodeRun struct {
	t    *testing.T
	c    twoNodeCase
	a    *nodeSide
	b    stepper
	vols []peerVolume
}

// run is the case: the VM on node A, a failed migration to node B, a
// second one that succeeds, and node A's cleanup.
func (r *twoNodeRun) run() {
	r.vols = r.c.volumes()
	src := r.a.n.launcher
	r.boot()
	l1 := r.failedMigration(src)
	r.secondMigration(src, l1)
	r.cleanUpA(src)
}

// boot has the VM run on node A with its volumes hotplugged, bound by
// virt-handler first.
func (r *twoNodeRun) boot() {
	r.ok(r.a, "create")
	for range 3 {
		r.ok(r.a, "vm")
	}
	r.hpmount(r.a, "hotplug", "")
	r.opens(r.a, "hotplug")
}

// failedMigration migrates the VM from launcher src to node B, where the
// migration fails, and returns the failed target's launcher.
func (r *twoNodeRun) failedMigration(src types.UID) types.UID {
	t, a, b := r.t, r.a, r.b
	l1, a1 := r.podOnB("launcher"), r.podOnB("attach")
	a.h.update(t, func(vmi *v1.VirtualMachineInstance) { migrateToB(vmi, "mig1", src, l1, a1) })
	r.prepare("first migration", r.c.First)
	r.ok(a, "source")
	r.ok(a, "vm")
	a.h.update(t, failMigration)
	r.ok(b, "target")
	r.ok(b, "exit")
	want := "detach removed"
	if r.c.Left {
		want = "detach " + string(outcome.LeftToHandler)
	}
	r.hpmount(b, "failed migration", want)
	held := b.step(t, "teardown", string(l1))
	t.Logf("the kubelet's teardown of the failed target's pod: %q", held)
	if (held != "") != r.c.Held {
		t.Errorf("the failed target's pod held by a bind: %q, want held %v", held, r.c.Held)
	}
	r.ok(a, "source")
	r.ok(a, "vm")
	r.opens(a, "failed migration")
	return l1
}

// secondMigration migrates the VM from launcher src to a new launcher on
// node B, which succeeds; where a bind held the failed target l1's pod,
// the kubelet's retry then removes it.
func (r *twoNodeRun) secondMigration(src, l1 types.UID) {
	t, a, b := r.t, r.a, r.b
	l2, a2 := types.UID(string(l1)+"-2"), r.podOnB("attach")+"-2"
	r.ok(b, "launch", string(l2), string(a2))
	a.h.update(t, func(vmi *v1.VirtualMachineInstance) { migrateToB(vmi, "mig2", src, l2, a2) })
	r.prepare("second migration", "hpmount")
	r.ok(a, "source")
	r.ok(a, "migrated")
	a.h.update(t, func(vmi *v1.VirtualMachineInstance) { completeOnB(vmi, l2, a2) })
	r.ok(b, "domain")
	r.ok(b, "target")
	r.ok(b, "vm")
	r.ok(b, "vm")
	r.opens(b, "second migration done")
	if r.c.Held {
		r.hpmount(b, "second migration done", "")
		r.ok(b, "teardown", string(l1))
	}
}

// cleanUpA has node A's virt-handler clean up after the VMI that left its
// informer, and the kubelet remove the source launcher src's pod. The
// VMI's active pods are node B's by then, so the cleanup finds no launcher
// cgroup on node A to deny a Block volume's device in: KubeVirt's own
// warning, whoever bound the volume.
func (r *twoNodeRun) cleanUpA(src types.UID) {
	t, a := r.t, r.a
	res := a.step(t, "vm")
	t.Logf("migrated away: node A's virt-handler cleaned up: %q", res)
	if res != "" {
		cleanupWarnings(t, errors.New(res))
	}
	r.ok(a, "exit")
	r.hpmount(a, "migrated away", "")
	targetsLeft(t, "migrated away", src, r.vols, false)
	r.ok(a, "teardown", string(src))
}

// podOnB is the UID of node B's first pod of kind ("launcher", "attach").
func (r *twoNodeRun) podOnB(kind string) types.UID {
	return types.UID(r.c.Prefix + "-" + kind + "-" + otherNode)
}

// prepare has hpmount and virt-handler's migration-target controller
// prepare node B's target, first one then the other, and checks that the
// target's QEMU opened every disk.
func (r *twoNodeRun) prepare(step, first string) {
	r.t.Helper()
	if first == "hpmount" {
		r.hpmount(r.b, step, "")
		r.ok(r.b, "target")
	} else {
		r.ok(r.b, "target")
		r.hpmount(r.b, step, "")
	}
	r.ok(r.b, "target")
	r.opens(r.b, step)
}

// ok runs a step that must come to nothing: a sync without an error.
func (r *twoNodeRun) ok(s stepper, name string, args ...string) {
	r.t.Helper()
	if got := s.step(r.t, name, args...); got != "" {
		r.t.Fatalf("%s on %s: %s", name, r.nodeOf(s), got)
	}
}

// hpmount runs one pass of hpmount on s, which must have no error; each
// outcome must be want, unless want is "".
func (r *twoNodeRun) hpmount(s stepper, step, want string) {
	r.t.Helper()
	out := s.step(r.t, "hpmount")
	r.t.Logf("%s: hpmount on %s: %s", step, r.nodeOf(s), out)
	for _, o := range strings.Split(out, outcomeSep) {
		_, got, _ := strings.Cut(o, "=")
		if strings.HasPrefix(got, "error") || want != "" && got != want {
			r.t.Fatalf("%s: hpmount on %s: %s, want %q", step, r.nodeOf(s), o, want)
		}
	}
}

// opens has the launcher's QEMU on s open every disk, which it must hold.
func (r *twoNodeRun) opens(s stepper, step string) {
	r.t.Helper()
	want := fmt.Sprintf("%d held, refused []", len(r.vols))
	if got := s.step(r.t, "opens"); got != want {
		r.t.Fatalf("%s: QEMU on %s: %s, want %s", step, r.nodeOf(s), got, want)
	}
}

func (r *twoNodeRun) nodeOf(s stepper) string {
	if s == stepper(r.a) {
		return firstNode
	}
	return otherNode
}

// migrateToB has vmi migrate from launcher src on node A to launcher l on
// node B, from attachment pod attach, as virt-controller writes it once
// both target pods run.
func migrateToB(vmi *v1.VirtualMachineInstance, migration, src, l, attach types.UID) {
	vmi.Labels[v1.MigrationTargetNodeNameLabel] = otherNode
	vmi.Status.ActivePods = map[types.UID]string{src: firstNode, l: otherNode}
	vmi.Status.MigrationState = &v1.VirtualMachineInstanceMigrationState{MigrationUID: migration,
		SourceNode: firstNode, SourcePod: "launcher-" + string(src), TargetNode: otherNode,
		TargetPod: "launcher-" + string(l), TargetAttachmentPodUID: attach}
}

// completeOnB is a successful migration's end, as virt-controller writes
// it: the VMI runs on node B in launcher l, its volumes from attachment
// pod attach.
func completeOnB(vmi *v1.VirtualMachineInstance, l, attach types.UID) {
	vmi.Labels[v1.NodeNameLabel], vmi.Status.NodeName = otherNode, otherNode
	vmi.Status.ActivePods = map[types.UID]string{l: otherNode}
	for i := range vmi.Status.VolumeStatus {
		hp := vmi.Status.VolumeStatus[i].HotplugVolume
		hp.AttachPodUID, hp.AttachPodName = attach, "hp-"+string(attach)
	}
	ms := vmi.Status.MigrationState
	ms.EndTimestamp, ms.Completed = now(), true
	if ms.StartTimestamp == nil {
		ms.StartTimestamp = ms.EndTimestamp
	}
}
