// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package peer

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"
	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/client-go/log"
	hotplugdisk "kubevirt.io/kubevirt/pkg/virt-handler/hotplug-disk"

	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/kubevirt"
)

// coNode is a peerNode that both mounters sync, step by step, as
// virt-handler and hpmount's agent would on one node: each pass of either
// is a whole sync of the VMI as it is now.
type coNode struct {
	*peerNode
	bin string
	// stateDir is virt-handler's mount-state directory; a fresh
	// VolumeMounter on it is virt-handler restarted.
	stateDir string
	// launchers are the VMI's launchers on the node, by UID, with what
	// the migration steps need of them; attachPodOf is each one's
	// attachment pod.
	launchers   map[types.UID]*pod
	attachPodOf map[types.UID]types.UID
	computeIDs  map[types.UID]string
	// migration, when set, is the in-flight migration's target launcher.
	migration types.UID
	// all are the node's volumes, in the spec or not; deleted is set
	// once the VMI is gone.
	all     []peerVolume
	deleted bool
	// gone are launchers that hold nothing desired (hpmount syncs them
	// empty); podsGone those whose pod is deleted too.
	gone, podsGone []types.UID
	// stuckAtOnce has hpmount take a record naming a gone target for
	// stuck at once, not after engine.Config.HandlerStuckAfter.
	stuckAtOnce bool
	// kvLog collects KubeVirt's log; hpErrs hpmount's errors.
	kvLog  *lockedBuffer
	hpErrs []string
	// rng picks the concurrent steps' head start; seamSkip is how many
	// of virt-handler's mounts and umounts the hpmount-inside order lets
	// by before it pauses one (the seeded mode draws it).
	rng       *rand.Rand
	lastDelay time.Duration
	seamSkip  int
	// handler, when set, is virt-handler's own controller syncing the
	// node (handler_linux_test.go); hpmount reads the VMI's status from
	// its API server.
	handler *kvHandler
	// syscalls counts hpmount's changing syscalls (strace) per sync.
	hpSyscalls int
	// traced is what strace saw of each sync that changed anything.
	traced []string
}

func newCoNode(t *testing.T, prefix string, vols []peerVolume) *coNode {
	t.Helper()
	n := &coNode{peerNode: newPeerNode(t, prefix, vols), bin: hpmountSideBin(t), stateDir: t.TempDir(),
		kvLog: &lockedBuffer{}, all: vols}
	n.launchers = map[types.UID]*pod{n.launcher: n.launcherPod}
	n.attachPodOf = map[types.UID]types.UID{n.launcher: n.attach}
	n.computeIDs = map[types.UID]string{n.launcher: computeID}
	log.Log.SetIOWriter(n.kvLog)
	log.DefaultLogger().SetIOWriter(n.kvLog)
	mgr, err := newCgroupManager(n.vmi())
	must(t, err)
	n.kvCgroup = mgr
	n.restartKubeVirt()
	return n
}

// restartKubeVirt is virt-handler restarted: a fresh mounter whose records
// are only what its state directory holds.
func (n *coNode) restartKubeVirt() {
	n.kvMounter = hotplugdisk.NewVolumeMounter(n.stateDir, podsDir, nodeName)
}

// vmiNow is the VMI as the node's current spec, launchers and migration
// make it.
func (n *coNode) vmiNow() *v1.VirtualMachineInstance {
	vmi := n.vmi()
	if n.migration != "" {
		vmi.Status.ActivePods[n.migration] = nodeName
		vmi.Status.MigrationState = &v1.VirtualMachineInstanceMigrationState{SourceNode: nodeName, TargetNode: nodeName,
			TargetPod: "launcher-" + string(n.migration), TargetAttachmentPodUID: n.attachPodOf[n.migration]}
	}
	return vmi
}

// kubeVirtSync is one VMI sync of virt-handler on this node: once the VMI
// is deleted its cleanup (kubeVirtCleanup), else Mount (or,
// on a migration target, MountFromPod of the target attachment pod) and
// then Unmount, as vm.go's handleRunningVMI and migration-target.go do,
// each sync with a cgroup manager of its own (vm.go's getCgroupManager):
// on v2 a manager keeps the rules it set in memory, so one kept across
// syncs would put back rules a real virt-handler has forgotten.
//
// While a migration's target launcher shares the node with its source, a
// layout production never has (the two are on different nodes), KubeVirt
// finds two launcher sockets and makes no manager; the sync then uses the
// one made with the first launcher alone, the test's own stand-in.
func (n *coNode) kubeVirtSync() error {
	if n.deleted {
		return n.kubeVirtCleanup()
	}
	vmi := n.vmiNow()
	mgr := n.kvCgroup
	if len(n.activeLaunchers()) == 1 {
		var err error
		if mgr, err = newCgroupManager(vmi); err != nil {
			return fmt.Errorf("cgroup manager: %w", err)
		}
	}
	if n.migration != "" {
		if err := n.kvMounter.Mount(vmi, mgr); err != nil {
			return fmt.Errorf("Mount: %w", err)
		}
		if err := n.kvMounter.MountFromPod(vmi, n.attachPodOf[n.migration], mgr); err != nil {
			return fmt.Errorf("MountFromPod: %w", err)
		}
		return nil
	}
	if err := n.kvMounter.Mount(vmi, mgr); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("Mount: %w", err)
	}
	if err := n.kvMounter.Unmount(vmi, mgr); err != nil {
		return fmt.Errorf("Unmount: %w", err)
	}
	return nil
}

// kubeVirtCleanup is virt-handler's cleanup of a VMI gone from the node
// (vm.go's processVmCleanup): UnmountAll, with a fresh cgroup manager, or
// none when the launcher cannot be found any more.
func (n *coNode) kubeVirtCleanup() error {
	mgr, _ := newCgroupManager(n.vmiNow())
	return n.kvMounter.UnmountAll(n.vmiNow(), mgr)
}

// desired is what hpmount's agent wants on the node now: each spec volume
// in each launcher, from that launcher's attachment pod.
func (n *coNode) desired() []desiredVolume {
	var out []desiredVolume
	if n.deleted {
		return nil
	}
	for _, l := range n.activeLaunchers() {
		for _, v := range n.vols {
			dv := desiredVolume{Name: v.name, Mode: v.mode, LauncherUID: l}
			dv.Source.AttachmentPodUID, dv.Source.PVName = n.attachPodOf[l], n.pvName(v)
			if v.mode == kubevirt.Block {
				dv.ComputeContainerID = "containerd://" + n.computeID(l)
			}
			out = append(out, dv)
		}
	}
	return out
}

func (n *coNode) activeLaunchers() []types.UID {
	if n.launcher == "" {
		return nil // the VMI runs elsewhere and no migration targets this node
	}
	ls := []types.UID{n.launcher}
	if n.migration != "" {
		ls = append(ls, n.migration)
	}
	return ls
}

// hpmountSync is one pass of hpmount's agent (hpmountside's sync, or
// another op on the desired volumes), a fresh engine each time, under
// strace to count its changing syscalls. It returns each volume's outcome.
func (n *coNode) hpmountSync(t *testing.T, op string) map[string]string {
	t.Helper()
	return n.hpmountPaused(t, op, nil)
}

// hpmountPaused is hpmountSync with between run after hpmount took its
// snapshot and before it acts on it (when between is not nil).
func (n *coNode) hpmountPaused(t *testing.T, op string, between func()) map[string]string {
	t.Helper()
	req := map[string]any{"op": op, "kubeletRoot": kubeletRoot, "cgroupRoot": n.cgroupRoot,
		"launcherDir": launcherView, "volumes": n.desired(), "launchers": n.gone,
		"handlerStateDir": n.stateDir, "vmi": n.vmi().UID, "podsGone": n.podsGone, "stuckAtOnce": n.stuckAtOnce}
	if inCgroupV2Node {
		req["cgroupMode"] = "v2"
	}
	if n.handler != nil {
		req["status"], req["served"] = n.handler.hpmountStatus(t), n.launcher
	}
	fifo := filepath.Join(n.stateDir, "pause")
	if between != nil {
		_ = os.Remove(fifo)
		must(t, unix.Mkfifo(fifo, 0o600))
		req["pause"] = fifo
	}
	in, err := json.Marshal(req)
	must(t, err)
	trace := filepath.Join(n.stateDir, "strace.out")
	// -y names each descriptor's path: a write counts only to a cgroup's
	// device rules.
	cmd := exec.Command("strace", "-f", "-qq", "-y", "-e", "signal=none", "-o", trace, "-e", "trace="+changingSyscalls, n.bin)
	cmd.Stdin = bytes.NewReader(in)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	must(t, cmd.Start())
	if between != nil {
		// Opening the FIFO returns once hpmountside has its snapshot
		// and waits on it; closing it lets hpmountside go on.
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		must(t, err)
		between()
		must(t, w.Close())
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("hpmountside %s: %v: %s", op, err, stderr.String())
	}
	out := stdout.Bytes()
	c := countTraced(t, trace)
	n.hpSyscalls += c
	if c > 0 {
		b, err := os.ReadFile(trace)
		must(t, err)
		n.traced = append(n.traced, strings.TrimSpace(string(b)))
	}
	var res []struct{ Name, Outcome, Error string }
	must(t, json.Unmarshal(out, &res))
	outcomes := map[string]string{}
	for _, r := range res {
		o := r.Outcome
		if r.Error != "" {
			o = "error: " + r.Error
			n.hpErrs = append(n.hpErrs, r.Name+": "+r.Error)
		}
		if outcomes[r.Name] != "" {
			o = outcomes[r.Name] + "," + o
		}
		outcomes[r.Name] = o
	}
	return outcomes
}

// changingSyscalls are the calls that can change the node's mounts,
// nodes, files, owners and device rules (strace's names); countTraced
// counts those of their lines that did.
const changingSyscalls = "mount,umount2,mknodat,unlinkat,renameat2,open_tree,move_mount,fsmount,mount_setattr," +
	"mkdirat,fchownat,fchown,openat,write,bpf"

// countTraced counts the calls strace wrote to path that changed
// something: every call of the mount family, an openat that may create
// (O_CREAT), a write to a cgroup's device rules (devices.allow or
// devices.deny, named by -y), a bpf(2) that loads or attaches a program.
// A call split by another thread's (unfinished ... resumed) counts once;
// not the line of a thread strace let go mid-call (<detached ...>) or of a
// call strace could not name as the process exited ("???( <unfinished
// ...>", never resumed): a call the -e trace filter could not judge, and
// which never returned.
func countTraced(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	must(t, err)
	c := 0
	for _, l := range strings.Split(string(b), "\n") {
		if l != "" && !strings.Contains(l, "resumed>") && !strings.Contains(l, "<detached") && !strings.Contains(l, "+++") && !strings.Contains(l, "---") &&
			!readOnlyUnnamed(l) && !strings.Contains(l, "???(") && changes(l) {
			c++
		}
	}
	return c
}

// changes tells a traced line of the calls that change something only
// sometimes: an openat without O_CREAT, a write elsewhere than to device
// rules, a bpf(2) that only asks.
func changes(line string) bool {
	switch call := callOf(line); call {
	case "openat":
		return strings.Contains(line, "O_CREAT")
	case "write":
		return strings.Contains(line, "devices.allow>") || strings.Contains(line, "devices.deny>")
	case "bpf":
		// cilium/ebpf's feature probes load socket filters and test
		// maps, and free them: only a device program changes a rule.
		return strings.Contains(line, "BPF_PROG_LOAD") && strings.Contains(line, "BPF_PROG_TYPE_CGROUP_DEVICE") ||
			strings.Contains(line, "BPF_PROG_ATTACH") || strings.Contains(line, "BPF_PROG_DETACH") || strings.Contains(line, "BPF_LINK_")
	}
	return true
}

// callOf is the name of the call on a line of strace -f: "PID name(...".
func callOf(line string) string {
	_, rest, _ := strings.Cut(strings.TrimSpace(line), " ")
	name, _, _ := strings.Cut(strings.TrimSpace(rest), "(")
	return name
}

// readOnlyUnnamed is a line of statmount(2) or listmount(2) (457, 458),
// which the engine reads one launcher's mounts with: strace 6.1 has no
// name for them and prints them whatever the -e trace filter says. They
// change nothing.
func readOnlyUnnamed(line string) bool {
	return strings.Contains(line, "syscall_0x1c9(") || strings.Contains(line, "syscall_0x1ca(")
}

// computeID is a launcher's compute container ID.
func (n *coNode) computeID(l types.UID) string {
	if n.computeIDs[l] == "" {
		n.computeIDs[l] = fmt.Sprintf("%016x", 0xc0ffee+len(n.computeIDs))
	}
	return n.computeIDs[l]
}

// targetPath is volume v's target in launcher l's hotplug-disks.
func targetPath(l types.UID, v peerVolume) string {
	name := v.name
	if v.mode == kubevirt.Filesystem {
		name += ".img"
	}
	return filepath.Join(kubeletRoot, kubelet.HotplugDisksDir(string(l)), name)
}

// seenPath is v's target as launcher process p sees it.
func seenPath(p *pod, v peerVolume) string {
	name := filepath.Base(targetPath("x", v))
	return fmt.Sprintf("/proc/%d/root%s/%s", p.pid(), launcherView, name)
}

// mountIDs are the node's mount IDs under the kubelet's root.
func mountIDs(t *testing.T) map[int]string {
	t.Helper()
	ms, err := mountinfo.GetMounts(nil)
	must(t, err)
	ids := map[int]string{}
	for _, m := range ms {
		// The kubelet's root is shared and also bound at /pods, as
		// virt-handler sees it: each mount there shows twice.
		if strings.HasPrefix(m.Mountpoint, kubeletRoot+"/") {
			ids[m.ID] = m.Mountpoint
		}
	}
	return ids
}

// mountChurn is how many mounts one table has that the other has not.
func mountChurn(before, after map[int]string) int {
	c := 0
	for id := range before {
		if _, ok := after[id]; !ok {
			c++
		}
	}
	for id := range after {
		if _, ok := before[id]; !ok {
			c++
		}
	}
	return c
}

// lockedBuffer is a bytes.Buffer that KubeVirt's logger and the test share.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

// take returns what was logged since the last take.
func (b *lockedBuffer) take() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := b.buf.String()
	b.buf.Reset()
	return s
}

// kvErrorLines are KubeVirt's log lines at level error or warning.
func kvErrorLines(logged string) []string {
	var out []string
	for _, l := range strings.Split(logged, "\n") {
		if strings.Contains(l, `"level":"error"`) || strings.Contains(l, `"level":"warning"`) {
			out = append(out, l)
		}
	}
	return out
}

// addLauncher starts another launcher of the VMI on the node (a migration
// target) with its hotplug-disks, compute cgroup and command socket.
func (n *coNode) addLauncher(t *testing.T, uid types.UID) {
	t.Helper()
	hotplug := filepath.Join(kubeletRoot, kubelet.HotplugDisksDir(string(uid)))
	must(t, os.MkdirAll(hotplug, 0o777))
	podCg := filepath.Join(n.cgroupRoot, "kubepods", "pod"+string(uid))
	compute := filepath.Join(podCg, n.computeID(uid))
	must(t, os.MkdirAll(compute, 0o755))
	if inCgroupV2Node {
		must(t, runtimeDevicesV2(compute))
	} else {
		must(t, os.WriteFile(filepath.Join(compute, "devices.deny"), []byte("a"), 0))
		must(t, os.WriteFile(filepath.Join(compute, "devices.allow"), []byte("c 1:3 rwm"), 0))
	}
	sockets := filepath.Join(podsDir, string(uid), "volumes/kubernetes.io~empty-dir/sockets/launcher-sock")
	p := startPod(t, sockets, "", hotplug+"="+launcherView)
	must(t, os.WriteFile(filepath.Join(compute, "cgroup.procs"), []byte(fmt.Sprint(p.pid())), 0))
	t.Cleanup(func() {
		p.stop()
		_ = unix.Rmdir(compute)
		_ = unix.Rmdir(podCg)
	})
	n.launchers[uid] = p
}

// addAttachPod publishes the spec's volumes again, on the same devices, to
// a new attachment pod uid, as the kubelet and the CSI driver do for a
// replacement or a migration target's pod, and starts its container.
func (n *coNode) addAttachPod(t *testing.T, uid types.UID) {
	t.Helper()
	disks := filepath.Join(kubeletRoot, kubelet.HotplugDisksDir(string(uid)))
	must(t, os.MkdirAll(disks, 0o777))
	var binds []string
	for _, v := range n.vols {
		if v.mode == kubevirt.Block {
			n.publishBlock(t, v, uid, disks)
			continue
		}
		mnt := n.mountDirOf(uid, v)
		must(t, os.MkdirAll(mnt, 0o750))
		must(t, unix.Mount(n.loops[v.name].Device, mnt, v.fstype, 0, ""))
		t.Cleanup(func() { _ = unix.Unmount(mnt, unix.MNT_DETACH) })
		binds = append(binds, mnt+"="+"/"+v.name)
	}
	startPod(t, filepath.Join(disks, "hp.sock"), strings.Join(binds, ";"), "")
}

func (n *coNode) mountDirOf(attach types.UID, v peerVolume) string {
	return filepath.Join(kubeletRoot, kubelet.VolumesDir(string(attach)), "kubernetes.io~csi", n.pvName(v), "mount")
}

func (n *coNode) publishBlock(t *testing.T, v peerVolume, attach types.UID, disks string) {
	t.Helper()
	loop := n.loops[v.name]
	pub := filepath.Join(kubeletRoot, kubelet.CSIPublishFile(n.pvName(v), string(attach)))
	must(t, os.MkdirAll(filepath.Dir(pub), 0o750))
	must(t, os.WriteFile(pub, nil, 0o600))
	must(t, unix.Mount(loop.Device, pub, "", unix.MS_BIND, ""))
	t.Cleanup(func() { _ = unix.Unmount(pub, unix.MNT_DETACH) })
	devices := filepath.Join(kubeletRoot, kubelet.VolumeDevicesDir(string(attach)), "kubernetes.io~csi")
	must(t, os.MkdirAll(devices, 0o750))
	must(t, os.Symlink(pub, filepath.Join(devices, n.pvName(v))))
	ctrDir := filepath.Join(disks, v.name)
	must(t, os.MkdirAll(ctrDir, 0o750))
	node := filepath.Join(ctrDir, "claim-uid")
	must(t, unix.Mknod(node, unix.S_IFBLK|0o660, int(loop.Dev(t))))
}

// unpublish takes the spec's volumes away from attachment pod uid, as the
// kubelet does when the pod is deleted: the CSI mounts go; the launcher's
// binds keep their filesystems.
func (n *coNode) unpublish(t *testing.T, uid types.UID) {
	t.Helper()
	for _, v := range n.vols {
		n.unpublishVolume(t, uid, v)
	}
}

// unpublishVolume takes volume v away from attachment pod uid.
func (n *coNode) unpublishVolume(t *testing.T, uid types.UID, v peerVolume) {
	t.Helper()
	if v.mode == kubevirt.Block {
		pub := filepath.Join(kubeletRoot, kubelet.CSIPublishFile(n.pvName(v), string(uid)))
		must(t, unix.Unmount(pub, unix.MNT_DETACH))
		must(t, os.Remove(filepath.Join(kubeletRoot, kubelet.VolumeDevicesDir(string(uid)), "kubernetes.io~csi", n.pvName(v))))
		return
	}
	if err := unix.Unmount(n.mountDirOf(uid, v), unix.MNT_DETACH); err == nil {
		must(t, os.Remove(n.mountDirOf(uid, v)))
	}
}

// hpmountSideBin builds test/peer/hpmountside from the committed tree with
// this working copy's main.go: other work in progress in the same tree
// must not break the peer's build. sideEnv names one built already.
func hpmountSideBin(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv(sideEnv); bin != "" {
		return bin
	}
	src := t.TempDir()
	archive := exec.Command("sh", "-c", `git -C ../../.. archive HEAD | tar -x -C "$1"`, "sh", src)
	if out, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("export the committed tree: %v: %s", err, out)
	}
	main, err := os.ReadFile("../hpmountside/main.go")
	must(t, err)
	must(t, os.WriteFile(filepath.Join(src, "test/peer/hpmountside/main.go"), main, 0o644))
	bin := filepath.Join(t.TempDir(), "hpmountside")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, "./test/peer/hpmountside")
	cmd.Dir = src
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build hpmountside: %v: %s", err, out)
	}
	return bin
}

// kubeVirtPaused runs kv (a sync of virt-handler) and, if it reaches a
// virt-chroot call whose arguments match the extended regular expression
// match after skip such calls, runs between while that
// call waits: after virt-handler's own look at the target and before its
// mount or umount (virtChrootSeam). It reports whether between ran; kv's
// error is returned either way.
func (n *coNode) kubeVirtPaused(t *testing.T, match string, skip int, kv func() error, between func()) (bool, error) {
	t.Helper()
	must(t, os.MkdirAll(filepath.Dir(seamPrefix), 0o755))
	for _, f := range []string{".arrive", ".proceed"} {
		_ = os.Remove(seamPrefix + f)
		must(t, unix.Mkfifo(seamPrefix+f, 0o600))
	}
	must(t, os.WriteFile(seamPrefix+".match", []byte(match), 0o600))
	must(t, os.WriteFile(seamPrefix+".skip", []byte(strconv.Itoa(skip)), 0o600))
	defer func() {
		for _, f := range []string{".match", ".skip", ".arrive", ".proceed"} {
			_ = os.Remove(seamPrefix + f)
		}
	}()
	done := make(chan error, 1)
	go func() { done <- kv() }()
	arrived := make(chan string, 1)
	go func() {
		// Opening the FIFO returns once a writer opened it: the seam,
		// or the test itself when kv ended without reaching it.
		b, _ := os.ReadFile(seamPrefix + ".arrive")
		arrived <- strings.TrimSpace(string(b))
	}()
	release := func(fifo string) {
		w, err := os.OpenFile(seamPrefix+fifo, os.O_WRONLY, 0)
		must(t, err)
		must(t, w.Close())
	}
	select {
	case call := <-arrived:
		t.Logf("virt-handler paused before virt-chroot %s", call)
		between()
		release(".proceed")
		return true, <-done
	case err := <-done:
		release(".arrive")
		<-arrived
		return false, err
	}
}
