// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package peer

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/mock/gomock"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	k8sfake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	framework "k8s.io/client-go/tools/cache/testing"
	"k8s.io/client-go/tools/record"
	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/kubecli"
	kubevirtclient "kubevirt.io/client-go/kubevirt"
	kubevirtfake "kubevirt.io/client-go/kubevirt/fake"
	"kubevirt.io/client-go/log"
	"kubevirt.io/kubevirt/pkg/controller"
	cmdv1 "kubevirt.io/kubevirt/pkg/handler-launcher-com/cmd/v1"
	"kubevirt.io/kubevirt/pkg/testutils"
	virtconfig "kubevirt.io/kubevirt/pkg/virt-config"
	virthandler "kubevirt.io/kubevirt/pkg/virt-handler"
	virtcache "kubevirt.io/kubevirt/pkg/virt-handler/cache"
	cmdclient "kubevirt.io/kubevirt/pkg/virt-handler/cmd-client"
	"kubevirt.io/kubevirt/pkg/virt-handler/isolation"
	launcherclients "kubevirt.io/kubevirt/pkg/virt-handler/launcher-clients"
	migrationproxy "kubevirt.io/kubevirt/pkg/virt-handler/migration-proxy"
	"kubevirt.io/kubevirt/pkg/virt-launcher/virtwrap/api"

	"github.com/hpmount/hpmount/kubevirt"
)

// kvHandler is virt-handler's own VM controller, KubeVirt's
// VirtualMachineController, for the coNode's VMI: its informers fed from
// a fake API server (or a real one, newKVHandlerOn), its real hotplug
// mounter, its real cgroup managers (a fresh one per sync, found through
// the launcher's socket) and its real status updates. Only what cannot
// run here is the test's own:
//   - virt-launcher (libvirt, which needs cgo): fakeLauncher attaches and
//     detaches the domain's disks as virt-launcher decides, each through a
//     real QEMU's blockdev-add and blockdev-del (launcherQEMU: uid 107, in
//     the launcher's mount namespace and compute container's cgroup);
//   - virt-controller: the test writes the volume status entries and
//     deletes an unplugged volume's attachment pod, as its
//     updateVolumeStatus and cleanupAttachmentPods do, and a migration's
//     state;
//   - the network, the migration proxies and the downward-metrics setup
//     (stubs that do nothing: they listen on the node's addresses and
//     hotplug does not reach them).
//
// Its migration-target and migration-source controllers share the domain
// informer and launcher clients (target, handler_target_linux_test.go).
type kvHandler struct {
	n    *coNode
	ctrl *virthandler.VirtualMachineController
	// vmis feeds the VM and migration-source controllers, targets the
	// migration-target controller: one informer on a fake API server,
	// or, on a real one, virt-handler's two, each with its label
	// selector (this node as the VMI's node, or as its migration's
	// target).
	vmis, targets vmiFeed
	// all is virt-handler's informer of every VMI, where the VM
	// controller looks for a VMI its own informer no longer has.
	all      vmiFeed
	domains  cache.SharedIndexInformer
	domSrc   *framework.FakeControllerSource
	client   kubevirtclient.Interface
	recorder *record.FakeRecorder
	launcher *fakeLauncher
	target   *virthandler.MigrationTargetController
	source   *virthandler.MigrationSourceController
}

// vmiFeed is one of virt-handler's VMI informers. On the fake API server
// the test feeds it (src); on a real one it watches the VMIs whose label
// names this node (label), or every VMI (no label).
type vmiFeed struct {
	cache.SharedIndexInformer
	src   *framework.FakeControllerSource
	label string
}

// selects tells whether the feed's informer watches vmi.
func (f vmiFeed) selects(vmi *v1.VirtualMachineInstance) bool {
	return f.src != nil || f.label == "" || vmi.Labels[f.label] == nodeName
}

// vmControllerDeps are NewVirtualMachineController's arguments that do
// not change between the versions (newVMController passes the rest).
type vmControllerDeps struct {
	recorder       record.EventRecorder
	client         kubecli.KubevirtClient
	privateDir     string
	launchers      launcherclients.LauncherClientsManager
	vmis           cache.SharedIndexInformer
	all            cache.Store
	domains        cache.SharedIndexInformer
	config         *virtconfig.ClusterConfig
	isolation      isolation.PodIsolationDetector
	migrationProxy migrationproxy.ProxyManager
}

// ghostCache is virt-handler's process-wide ghost record cache, which the
// controller's cleanup writes to; set up once per test binary.
var ghostCache sync.Once

// newKVHandler is virt-handler on a fake API server, whose one VMI
// informer the test feeds.
func newKVHandler(t *testing.T, n *coNode) *kvHandler {
	t.Helper()
	fake := kubevirtfake.NewSimpleClientset()
	h := &kvHandler{n: n, client: fake}
	inf, src := testutils.NewFakeInformerFor(&v1.VirtualMachineInstance{})
	h.vmis = vmiFeed{SharedIndexInformer: inf, src: src}
	h.targets, h.all = h.vmis, h.vmis
	virtClient := kubecli.NewMockKubevirtClient(gomock.NewController(t))
	virtClient.EXPECT().CoreV1().Return(k8sfake.NewSimpleClientset().CoreV1()).AnyTimes()
	virtClient.EXPECT().VirtualMachineInstance(gomock.Any()).DoAndReturn(func(ns string) kubecli.VirtualMachineInstanceInterface {
		return fake.KubevirtV1().VirtualMachineInstances(ns)
	}).AnyTimes()
	h.wire(t, virtClient)
	return h
}

// newKVHandlerOn is virt-handler on the real API server cfg names, with
// its own client and informers (KubeVirt's informer factory), as on a
// node of a cluster.
func newKVHandlerOn(t *testing.T, n *coNode, cfg *rest.Config) *kvHandler {
	t.Helper()
	virtClient, err := kubecli.GetKubevirtClientFromRESTConfig(cfg)
	must(t, err)
	h := &kvHandler{n: n, client: virtClient.GeneratedKubeVirtClient()}
	f := controller.NewKubeInformerFactory(virtClient.RestClient(), virtClient, nil, "kubevirt")
	h.vmis = vmiFeed{SharedIndexInformer: f.VMISourceHost(nodeName), label: v1.NodeNameLabel}
	h.targets = vmiFeed{SharedIndexInformer: f.VMITargetHost(nodeName), label: v1.MigrationTargetNodeNameLabel}
	h.all = vmiFeed{SharedIndexInformer: f.VMI()}
	h.wire(t, virtClient)
	return h
}

// wire makes virt-handler's controllers on the client and informers of h
// and starts the informers.
func (h *kvHandler) wire(t *testing.T, virtClient kubecli.KubevirtClient) {
	t.Helper()
	ghostCache.Do(func() {
		dir, err := os.MkdirTemp("/run", "peer-ghosts-")
		must(t, err)
		virtcache.InitializeGhostRecordCache(virtcache.NewIterableCheckpointManager(dir))
	})
	// Above virt-handler's default verbosity (--v 2), whose Info lines,
	// such as the reason a sync re-queued the key, must be logged: at 4
	// a controller says when it is still waiting on its expectations
	// (execute).
	must(t, log.Log.SetVerbosityLevel(max(peerDebugLevel(), 4)))
	t.Cleanup(func() { _ = log.Log.SetVerbosityLevel(0) })
	private := t.TempDir()
	h.n.stateDir = filepath.Join(private, "hotplug-volume-mount-state")
	h.recorder = record.NewFakeRecorder(1000)
	h.domains, h.domSrc = testutils.NewFakeInformerFor(&api.Domain{})
	// No KVM on this machine: virt-handler allows emulation, as a cluster
	// with developerConfiguration.useEmulation does.
	config, _, _ := testutils.NewFakeClusterConfigUsingKVConfig(&v1.KubeVirtConfiguration{
		DeveloperConfiguration: &v1.DeveloperConfiguration{UseEmulation: true}})
	h.launcher = newFakeLauncher(t, h.n.launcherPod, h.n.computeCgroup)
	client := cmdclient.NewMockLauncherClient(gomock.NewController(t))
	client.EXPECT().SyncVirtualMachine(gomock.Any(), gomock.Any()).DoAndReturn(
		func(vmi *v1.VirtualMachineInstance, o *cmdv1.VirtualMachineOptions) error {
			return h.launcher.sync(vmi, o)
		}).AnyTimes()
	expectMigrationTarget(client, h)
	expectMigrationSource(client, h)
	clients := &launcherclients.MockLauncherClientManager{Initialized: true, Client: client,
		ClientInfo: &virtcache.LauncherClientInfo{Client: client, Ready: true}}
	deps := func(vmis cache.SharedIndexInformer) vmControllerDeps {
		return vmControllerDeps{recorder: h.recorder, client: virtClient, privateDir: private,
			launchers: clients, vmis: vmis, all: h.all.GetStore(), domains: h.domains, config: config,
			isolation: isolation.NewSocketBasedIsolationDetector(), migrationProxy: &noMigrationProxy{}}
	}
	var err error
	h.ctrl, err = newVMController(deps(h.vmis))
	must(t, err)
	h.target, err = newMigrationTargetController(deps(h.targets))
	must(t, err)
	h.source, err = newMigrationSourceController(deps(h.vmis))
	must(t, err)
	stop := make(chan struct{})
	t.Cleanup(func() { close(stop) })
	go h.domains.Run(stop)
	synced := []cache.InformerSynced{h.domains.HasSynced}
	for _, f := range []vmiFeed{h.vmis, h.targets, h.all} {
		go f.Run(stop)
		synced = append(synced, f.HasSynced)
		if f.src != nil {
			break // the fake API server's one informer
		}
	}
	if !cache.WaitForCacheSync(stop, synced...) {
		t.Fatal("virt-handler's informers did not sync")
	}
}

// start creates the VMI, Running, and its domain, Running with no
// hotplugged disk yet, as they are once the VM has booted.
func (h *kvHandler) start(t *testing.T) {
	t.Helper()
	vmi := h.n.vmi()
	vmi.Status.Phase = v1.Running
	vmi.Annotations = webhookAnnotations()
	h.create(t, vmi)
	h.domainRunning(t)
}

// domainRunning is the launcher's domain, Running with no hotplugged
// disk yet, as it is once the VM has booted or a migration has handed it
// over.
func (h *kvHandler) domainRunning(t *testing.T) {
	t.Helper()
	vmi := h.n.vmi()
	dom := api.NewMinimalDomainWithNS(vmi.Namespace, vmi.Name)
	dom.Spec.Metadata.KubeVirt.UID = vmi.UID
	dom.Status.Status = api.Running
	h.domSrc.Add(dom)
	h.launcher.domain = dom.DeepCopy()
	h.waitFor(t, h.domains, dom.ResourceVersion)
}

// create writes vmi to the API server and waits until virt-handler's
// informer has it.
func (h *kvHandler) create(t *testing.T, vmi *v1.VirtualMachineInstance) {
	t.Helper()
	created, err := h.client.KubevirtV1().VirtualMachineInstances(vmi.Namespace).Create(context.Background(), vmi, metav1.CreateOptions{})
	must(t, err)
	h.n.uid = created.UID
	if h.vmis.src != nil {
		h.vmis.src.Add(created)
	}
	h.catchUp(t, h.vmis, created)
}

// sync is one sync of the VMI by virt-handler, as a change of it or of
// its domain starts one: the key is queued, Execute runs it, and what it
// wrote to the VMI comes back through the informer. It returns the sync's
// errors: each line virt-handler logged at level error or warning, the
// reason it re-queued the key, and each Warning event it recorded.
func (h *kvHandler) sync(t *testing.T) error {
	t.Helper()
	return h.run(t, h.ctrl.Execute, h.vmis)
}

// syncSource is one sync of the VMI by virt-handler's migration-source
// controller, with sync's error check.
func (h *kvHandler) syncSource(t *testing.T) error {
	t.Helper()
	return h.run(t, h.source.Execute, h.vmis)
}

// run is one sync of the VMI by one of virt-handler's controllers
// (execute runs its queue's next key, from feed); see sync.
func (h *kvHandler) run(t *testing.T, execute func() bool, feed vmiFeed) error {
	t.Helper()
	h.n.kvLog.take()
	logged := h.execute(t, execute, feed)
	h.feedBack(t)
	logged += h.n.kvLog.take()
	if peerDebugLevel() > 0 {
		t.Logf("virt-handler logged:\n%s", logged)
	}
	errs := kvErrorLines(logged)
	for _, l := range strings.Split(logged, "\n") {
		if strings.Contains(l, "re-enqueuing VirtualMachineInstance") {
			errs = append(errs, l)
		}
	}
	for len(h.recorder.Events) > 0 {
		if e := <-h.recorder.Events; strings.HasPrefix(e, "Warning") {
			errs = append(errs, e)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("virt-handler's sync: %s", strings.Join(errs, "; "))
	}
	return nil
}

// execute has the controller run one sync of the VMI's key, touched
// through feed, and returns what it logged. A controller that wrote the
// VMI waits to see its write come back (its expectations, lowered by its
// informer handler) and syncs nothing until then. The informer's store
// can hold the write before that handler has run, so a sync that found
// the controller still waiting did nothing, and runs again.
func (h *kvHandler) execute(t *testing.T, execute func() bool, feed vmiFeed) string {
	t.Helper()
	var logged strings.Builder
	for range 100 {
		h.touch(t, feed)
		done := make(chan struct{})
		go func() { execute(); close(done) }()
		select {
		case <-done:
		case <-time.After(time.Minute):
			t.Fatal("virt-handler's controller found no key in its queue for a minute")
		}
		out := h.n.kvLog.take()
		logged.WriteString(out)
		if !strings.Contains(out, "still waiting on expectations") {
			return logged.String()
		}
	}
	t.Fatal("virt-handler's controller was still waiting on its expectations after 100 syncs")
	return ""
}

// touch sends the VMI as it is to feed's informer, as a watch event
// does, so that the controller queues its key. On a real API server it
// writes an annotation, whose watch event does that; a VMI the feed no
// longer watches left its key there with the watch's delete event.
func (h *kvHandler) touch(t *testing.T, feed vmiFeed) {
	t.Helper()
	vmi := h.get(t)
	if feed.src != nil {
		feed.src.Modify(vmi)
		h.waitFor(t, feed, vmi.ResourceVersion)
		return
	}
	h.update(t, func(vmi *v1.VirtualMachineInstance) {
		n, _ := strconv.Atoi(vmi.Annotations[touchAnnotation])
		if vmi.Annotations == nil {
			vmi.Annotations = map[string]string{}
		}
		vmi.Annotations[touchAnnotation] = strconv.Itoa(n + 1)
	})
	vmi = h.get(t)
	h.catchUp(t, feed, vmi)
	h.catchUp(t, h.all, vmi)
}

// touchAnnotation is the annotation touch counts up.
const touchAnnotation = "peer.hpmount.io/touch"

// catchUp waits until feed's informer has vmi as the API server wrote
// it, or, if the feed does not watch vmi, has it no more.
func (h *kvHandler) catchUp(t *testing.T, feed vmiFeed, vmi *v1.VirtualMachineInstance) {
	t.Helper()
	if feed.selects(vmi) {
		h.waitFor(t, feed, vmi.ResourceVersion)
		return
	}
	key := vmi.Namespace + "/" + vmi.Name
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		_, exists, err := feed.GetStore().GetByKey(key)
		return !exists, err
	})
	if err != nil {
		t.Fatalf("virt-handler's informer still holds %s: %v", key, err)
	}
}

// feedBack brings the domain fakeLauncher left to virt-handler's
// informer, as virt-launcher's domain events do.
func (h *kvHandler) feedBack(t *testing.T) {
	t.Helper()
	if h.launcher.domain.Name == "" {
		return // no domain yet, no event
	}
	dom := h.launcher.domain.DeepCopy()
	h.domSrc.Modify(dom)
	h.waitFor(t, h.domains, dom.ResourceVersion)
}

// waitFor waits until informer's store holds an object at resource
// version rv.
func (h *kvHandler) waitFor(t *testing.T, informer cache.SharedIndexInformer, rv string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		for _, o := range informer.GetStore().List() {
			if m, err := objectMeta(o); err == nil && m.GetResourceVersion() == rv {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("informer never saw resource version %s: %v", rv, err)
	}
}

// remarshal decodes into out what in encodes to in JSON: KubeVirt's
// types read as hpmount's model.
func remarshal(in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}

func objectMeta(o any) (metav1.Object, error) {
	m, ok := o.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("%T has no object meta", o)
	}
	return m, nil
}

// get is the VMI as the API server has it.
func (h *kvHandler) get(t *testing.T) *v1.VirtualMachineInstance {
	t.Helper()
	vmi := h.n.vmi()
	got, err := h.client.KubevirtV1().VirtualMachineInstances(vmi.Namespace).Get(context.Background(), vmi.Name, metav1.GetOptions{})
	must(t, err)
	h.n.uid = got.UID // a real API server's, which the domain and the record carry
	return got
}

// update writes the VMI back after change, as virt-controller or a user
// does.
func (h *kvHandler) update(t *testing.T, change func(*v1.VirtualMachineInstance)) {
	t.Helper()
	vmi := h.get(t)
	change(vmi)
	_, err := h.client.KubevirtV1().VirtualMachineInstances(vmi.Namespace).Update(context.Background(), vmi, metav1.UpdateOptions{})
	must(t, err)
}

// unplug removes volume name from the spec, as the user's removeVolume
// does; its status entry stays for virt-controller to remove.
func (h *kvHandler) unplug(t *testing.T, name string) {
	t.Helper()
	h.update(t, func(vmi *v1.VirtualMachineInstance) {
		vmi.Spec.Volumes = slices.DeleteFunc(vmi.Spec.Volumes, func(v v1.Volume) bool { return v.Name == name })
	})
}

// status is the status entry of volume name, nil once removed.
func (h *kvHandler) status(t *testing.T, name string) *v1.VolumeStatus {
	t.Helper()
	for _, st := range h.get(t).Status.VolumeStatus {
		if st.Name == name {
			return &st
		}
	}
	return nil
}

// dropStatus removes volume name's status entry, as virt-controller does
// once the volume's attachment pod is gone.
func (h *kvHandler) dropStatus(t *testing.T, name string) {
	t.Helper()
	h.update(t, func(vmi *v1.VirtualMachineInstance) {
		vmi.Status.VolumeStatus = slices.DeleteFunc(vmi.Status.VolumeStatus, func(st v1.VolumeStatus) bool { return st.Name == name })
	})
}

// hpmountStatus is the VMI's status as hpmount's agent reads it, in
// hpmount's model.
func (h *kvHandler) hpmountStatus(t *testing.T) kubevirt.VMIStatus {
	t.Helper()
	var st kubevirt.VMIStatus
	must(t, remarshal(h.get(t).Status, &st))
	return st
}

// fakeLauncher is virt-launcher's side of a sync for hotplugged disks:
// a hotplug volume whose status says it is mounted in the pod (or ready)
// is attached to the domain once its target is in the launcher's
// hotplug-disks, and a disk whose volume left the spec is detached. The
// launcher's QEMU opens each disk attached (blockdev-add) and holds it
// until it is detached (blockdev-del); after each sync it is asked to
// open every attached disk again. A failure is QEMU's error, kept in
// refused, and an attach QEMU refused is tried again at the next sync.
type fakeLauncher struct {
	// pod is the launcher's process, and qemu its QEMU.
	pod    *pod
	qemu   *launcherQEMU
	mu     sync.Mutex
	domain *api.Domain
	// refused are QEMU's opens that failed, by sync.
	refused []string
	syncs   int
}

// newFakeLauncher is the virt-launcher of launcher pod p, whose compute
// container's cgroup is cgroup, with no domain yet.
func newFakeLauncher(t *testing.T, p *pod, cgroup string) *fakeLauncher {
	return &fakeLauncher{pod: p, qemu: startLauncherQEMU(t, cgroup, p), domain: &api.Domain{}}
}

func (l *fakeLauncher) sync(vmi *v1.VirtualMachineInstance, _ *cmdv1.VirtualMachineOptions) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.syncs++
	inSpec := map[string]bool{}
	for _, v := range vmi.Spec.Volumes {
		inSpec[v.Name] = true
	}
	var disks []api.Disk
	attached := map[string]bool{}
	for _, d := range l.domain.Spec.Devices.Disks {
		if inSpec[d.Alias.GetName()] {
			disks = append(disks, d)
			attached[d.Alias.GetName()] = true
		}
	}
	for _, st := range vmi.Status.VolumeStatus {
		if st.HotplugVolume == nil || !inSpec[st.Name] || attached[st.Name] || st.MemoryDumpVolume != nil ||
			(st.Phase != v1.HotplugVolumeMounted && st.Phase != v1.VolumeReady) {
			continue
		}
		if d, ok := l.disk(st); ok {
			disks = append(disks, d)
		}
	}
	l.domain.Spec.Devices.Disks = disks
	if err := l.hold(disks); err != nil {
		return err
	}
	l.open(disks)
	return nil
}

// exit is the launcher's QEMU exiting: the domain holds nothing more.
func (l *fakeLauncher) exit() {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.qemu.q.Kill()
	l.qemu.held = map[string]bool{}
	l.domain.Spec.Devices.Disks = nil
}

// hold has QEMU hold exactly the domain's disks: it closes the nodes of
// disks detached and opens those attached.
func (l *fakeLauncher) hold(disks []api.Disk) error {
	keep := map[string]bool{}
	for _, d := range disks {
		keep[d.Alias.GetName()] = true
	}
	for name := range l.qemu.held {
		if !keep[name] {
			if err := l.qemu.detach(name); err != nil {
				return fmt.Errorf("QEMU's blockdev-del of %s: %w", name, err)
			}
		}
	}
	for _, d := range disks {
		if name := d.Alias.GetName(); !l.qemu.held[name] {
			if err := l.qemu.attach(name, d.Source.File+d.Source.Dev, d.Source.Dev != ""); err != nil {
				l.refused = append(l.refused, fmt.Sprintf("sync %d: attach %s: %v", l.syncs, name, err))
			}
		}
	}
	return nil
}

// disk is the domain disk of a hotplugged volume, as virt-launcher's
// converter makes it, if its target is there.
func (l *fakeLauncher) disk(st v1.VolumeStatus) (api.Disk, bool) {
	d := api.Disk{Alias: api.NewUserDefinedAlias(st.Name), Target: api.DiskTarget{Bus: "scsi", Device: "sd" + st.Name[:1]}}
	name := st.Name
	block := st.PersistentVolumeClaimInfo != nil && st.PersistentVolumeClaimInfo.VolumeMode != nil &&
		*st.PersistentVolumeClaimInfo.VolumeMode == "Block"
	if !block {
		name += ".img"
	}
	path := filepath.Join(launcherView, name)
	if _, err := os.Stat(fmt.Sprintf("/proc/%d/root%s", l.pod.pid(), path)); err != nil {
		return d, false
	}
	if block {
		d.Source.Dev = path
	} else {
		d.Source.File = path
	}
	return d, true
}

// open asks QEMU to open every attached disk again (launcherQEMU.probe).
func (l *fakeLauncher) open(disks []api.Disk) {
	for _, d := range disks {
		name := d.Alias.GetName()
		if err := l.qemu.probe(name, d.Source.File+d.Source.Dev, d.Source.Dev != ""); err != nil {
			l.refused = append(l.refused, fmt.Sprintf("sync %d: open %s: %v", l.syncs, name, err))
		}
	}
}

// attached lists the domain's disks by volume name.
func (l *fakeLauncher) attached() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var names []string
	for _, d := range l.domain.Spec.Devices.Disks {
		names = append(names, d.Alias.GetName())
	}
	return names
}

// noDownwardMetrics, noNetConf and noNetStat stand in for virt-handler's
// downward metrics server and network setup, which hotplug does not reach.
type (
	noDownwardMetrics struct{}
	noNetConf         struct{}
	noNetStat         struct{}
)

func (noDownwardMetrics) Run(chan struct{})                                  {}
func (noDownwardMetrics) StartServer(*v1.VirtualMachineInstance, int) error  { return nil }
func (noDownwardMetrics) StopServer(*v1.VirtualMachineInstance)              {}
func (noNetConf) Setup(*v1.VirtualMachineInstance, []v1.Network, int) error  { return nil }
func (noNetConf) Teardown(*v1.VirtualMachineInstance) error                  { return nil }
func (noNetStat) UpdateStatus(*v1.VirtualMachineInstance, *api.Domain) error { return nil }
func (noNetStat) Teardown(*v1.VirtualMachineInstance)                        {}

// debugEnv, set to a verbosity, has virt-handler log at it, and each of
// its syncs print what it logged.
const debugEnv = "HPMOUNT_PEER_DEBUG"

func peerDebugLevel() int {
	n, _ := strconv.Atoi(os.Getenv(debugEnv))
	return n
}
