// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package peer

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/moby/sys/mountinfo"
	"golang.org/x/sys/unix"
	k8sv1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	v1 "kubevirt.io/api/core/v1"
	"kubevirt.io/kubevirt/pkg/virt-handler/cgroup"
	hotplugdisk "kubevirt.io/kubevirt/pkg/virt-handler/hotplug-disk"

	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/kubevirt"
)

const (
	computeID = "0123456789abcdef"
	// launcherView is where the launcher's compute container mounts its
	// hotplug-disks emptyDir (/var/run is /run on the node).
	launcherView = "/run/kubevirt/hotplug-disks"
)

// peerVolume is one hotplug volume of the simulated VMI.
type peerVolume struct {
	name   string
	mode   kubevirt.VolumeMode
	fstype string // Filesystem and Directory: the PVC's filesystem
	// noDiskImg: a Filesystem claim whose filesystem holds no disk.img.
	noDiskImg bool
	// pod names the attachment pod that publishes the volume and that its
	// status names; "" is the node's first one (peerNode.attach).
	pod string
	// alsoIn names another attachment pod that publishes the same
	// filesystem too (the same device, kubevirt#16520).
	alsoIn string
	// pv, when set, is the PV hpmount is told the claim is bound to
	// instead of the published one (a claim the spec names that this node
	// does not publish).
	pv string
}

// peerNode is one fresh simulated node: a launcher and an attachment pod
// of one VMI, both pods' kubelet directories, a device cgroup for the
// launcher's compute container, and the volumes published as the kubelet
// and a CSI driver publish them.
type peerNode struct {
	prefix           string
	launcher, attach types.UID
	vols             []peerVolume
	loops            map[string]*testutil.Loop
	cgroupRoot       string // CgroupRoot of hpmount's config (v1 devices, or the v2 cgroup)
	// other is a block device of no volume: the launcher must not open it.
	other *testutil.Loop
	// kvState is KubeVirt's mount state directory (its record files).
	kvState string
	// kvMounter and kvCgroup are KubeVirt's, kept across calls as
	// virt-handler keeps them (its records live in memory and stateDir).
	kvMounter     hotplugdisk.VolumeMounter
	kvCgroup      cgroup.Manager
	computeCgroup string
	launcherPod   *pod
	// attachPods are the attachment pods' processes by pod UID.
	attachPods map[types.UID]*pod
	// uid is the VMI's UID once a real API server gave it one.
	uid types.UID
}

func newPeerNode(t *testing.T, prefix string, vols []peerVolume) *peerNode {
	t.Helper()
	testutil.RequiresRoot(t)
	n := &peerNode{prefix: prefix, launcher: types.UID(prefix + "-launcher" + podSuffix), attach: types.UID(prefix + "-attach" + podSuffix),
		vols: vols, loops: map[string]*testutil.Loop{}}
	hotplug := filepath.Join(kubeletRoot, kubelet.HotplugDisksDir(string(n.launcher)))
	must(t, os.MkdirAll(hotplug, 0o777))
	for _, v := range vols {
		n.publish(t, v, n.attachDisks(t, n.attachOf(v)))
	}
	for _, v := range vols {
		if v.alsoIn != "" {
			// The CSI driver publishes the device again for the other pod.
			also := n.mountDirIn(n.podUID(v.alsoIn), v)
			must(t, os.MkdirAll(also, 0o750))
			must(t, unix.Mount(n.mountDir(v), also, "", unix.MS_BIND, ""))
			t.Cleanup(func() { _ = unix.Unmount(also, unix.MNT_DETACH) })
		}
	}
	n.other = testutil.NewLoop(t, 1<<20)
	podCgroup := n.makeCgroups(t)
	sockets := filepath.Join(podsDir, string(n.launcher), "volumes/kubernetes.io~empty-dir/sockets/launcher-sock")
	n.launcherPod = startPod(t, sockets, "", hotplug+"="+launcherView)
	must(t, os.WriteFile(filepath.Join(n.computeCgroup, "cgroup.procs"), []byte(fmt.Sprint(n.launcherPod.pid())), 0))
	t.Cleanup(func() {
		n.launcherPod.stop()
		for _, d := range []string{n.computeCgroup, podCgroup, filepath.Dir(podCgroup), n.cgroupRoot} {
			_ = unix.Rmdir(d)
		}
	})
	// Each attachment pod's container (container-disk --copy-path
	// /path/hp) owns hp.sock and sees each filesystem volume it carries at
	// /<volume>.
	binds := map[types.UID][]string{n.attach: nil}
	for _, v := range vols {
		binds[n.attachOf(v)] = binds[n.attachOf(v)]
		if v.mode != kubevirt.Block {
			binds[n.attachOf(v)] = append(binds[n.attachOf(v)], n.mountDir(v)+"=/"+v.name)
		}
		if v.alsoIn != "" {
			binds[n.podUID(v.alsoIn)] = append(binds[n.podUID(v.alsoIn)], n.mountDirIn(n.podUID(v.alsoIn), v)+"=/"+v.name)
		}
	}
	n.attachPods = map[types.UID]*pod{}
	for _, uid := range slices.Sorted(maps.Keys(binds)) {
		n.attachPods[uid] = startPod(t, filepath.Join(n.attachDisks(t, uid), "hp.sock"), strings.Join(binds[uid], ";"), "")
	}
	return n
}

// podUID is the UID of the attachment pod the test calls name.
func (n *peerNode) podUID(name string) types.UID {
	if name == "" {
		return n.attach
	}
	return types.UID(n.prefix + "-" + name + podSuffix)
}

// attachOf is the UID of the attachment pod that publishes v.
func (n *peerNode) attachOf(v peerVolume) types.UID { return n.podUID(v.pod) }

// attachDisks makes and returns the hotplug-disks emptyDir of pod uid.
func (n *peerNode) attachDisks(t *testing.T, uid types.UID) string {
	t.Helper()
	dir := filepath.Join(kubeletRoot, kubelet.HotplugDisksDir(string(uid)))
	must(t, os.MkdirAll(dir, 0o777))
	return dir
}

// makeCgroups makes the launcher pod's cgroup and its compute
// container's, where a container runtime denies every device but a few,
// and returns the pod's. On v1 the runtime writes devices.deny and
// devices.allow; on v2 runc (v1.1.14, the one KubeVirt v1.7.0 builds on)
// attaches its device program.
func (n *peerNode) makeCgroups(t *testing.T) string {
	t.Helper()
	// Every node's test process is PID 1 of its own namespace: the node's
	// name keeps two nodes of one machine apart.
	name := fmt.Sprintf("hpmount-peer-%s-%s-%d", n.prefix, nodeName, os.Getpid())
	n.cgroupRoot = filepath.Join("/sys/fs/cgroup/devices", name)
	if inCgroupV2Node {
		n.cgroupRoot = filepath.Join("/sys/fs/cgroup", name)
	}
	pod := filepath.Join(n.cgroupRoot, "kubepods", "pod"+string(n.launcher))
	n.computeCgroup = filepath.Join(pod, computeID)
	must(t, os.MkdirAll(n.computeCgroup, 0o755))
	if inCgroupV2Node {
		must(t, runtimeDevicesV2(n.computeCgroup))
		return pod
	}
	must(t, os.WriteFile(filepath.Join(n.computeCgroup, "devices.deny"), []byte("a"), 0))
	must(t, os.WriteFile(filepath.Join(n.computeCgroup, "devices.allow"), []byte("c 1:3 rwm"), 0))
	return pod
}

func (n *peerNode) pvName(v peerVolume) string { return "pv-" + n.prefix + "-" + v.name }

// hpmountPV is the PV hpmount is given for v.
func (n *peerNode) hpmountPV(v peerVolume) string {
	if v.pv != "" {
		return v.pv
	}
	return n.pvName(v)
}

func (n *peerNode) mountDir(v peerVolume) string { return n.mountDirIn(n.attachOf(v), v) }

// mountDirIn is where the kubelet publishes v's filesystem for pod uid.
func (n *peerNode) mountDirIn(uid types.UID, v peerVolume) string {
	return filepath.Join(kubeletRoot, kubelet.VolumesDir(string(uid)), "kubernetes.io~csi", n.pvName(v), "mount")
}

// publish makes a volume as the kubelet and a CSI driver leave it for the
// attachment pod: a mounted filesystem holding disk.img (Filesystem) or
// not (Directory); for Block the CSI publish file with the device bound on
// it, the kubelet's volumeDevices link to it, and the node the container
// runtime makes for the container in the pod's hotplug-disks emptyDir
// (devicePath /path/<volume>/<claim UID>), which is where KubeVirt looks.
func (n *peerNode) publish(t *testing.T, v peerVolume, attachDisks string) {
	t.Helper()
	if v.mode != kubevirt.Block {
		mnt := n.mountDir(v)
		size := int64(64 << 20)
		if v.fstype == "xfs" {
			size = testutil.MinXFSSize
		}
		n.loops[v.name] = testutil.NewFilesystem(t, v.fstype, size, mnt)
		if v.mode == kubevirt.Filesystem && !v.noDiskImg {
			must(t, os.WriteFile(filepath.Join(mnt, "disk.img"), make([]byte, 1<<20), 0o660))
		}
		return
	}
	loop := testutil.NewLoop(t, 16<<20)
	n.loops[v.name] = loop
	pub := filepath.Join(kubeletRoot, kubelet.CSIPublishFile(n.pvName(v), string(n.attachOf(v))))
	must(t, os.MkdirAll(filepath.Dir(pub), 0o750))
	must(t, os.WriteFile(pub, nil, 0o600))
	must(t, unix.Mount(loop.Device, pub, "", unix.MS_BIND, ""))
	t.Cleanup(func() { _ = unix.Unmount(pub, unix.MNT_DETACH) })
	devices := filepath.Join(kubeletRoot, kubelet.VolumeDevicesDir(string(n.attachOf(v))), "kubernetes.io~csi")
	must(t, os.MkdirAll(devices, 0o750))
	must(t, os.Symlink(pub, filepath.Join(devices, n.pvName(v))))
	// The runtime gives the container's node the host node's mode: 0660
	// for a node's disks (udev's root:disk), whatever mode this machine's
	// loop devices have.
	ctrDir := filepath.Join(attachDisks, v.name)
	must(t, os.MkdirAll(ctrDir, 0o750))
	node := filepath.Join(ctrDir, "claim-uid")
	must(t, unix.Mknod(node, unix.S_IFBLK|0o600, int(loop.Dev(t))))
	must(t, unix.Chmod(node, 0o660))
}

// vmi is the VMI both mounters are given, in KubeVirt's types.
func (n *peerNode) vmi() *v1.VirtualMachineInstance {
	vmi := &v1.VirtualMachineInstance{}
	vmi.Name, vmi.Namespace, vmi.UID = "vm-"+n.prefix, "ns", cmp.Or(n.uid, types.UID("vmi-"+n.prefix))
	vmi.Labels = map[string]string{v1.NodeNameLabel: nodeName}
	vmi.Status.NodeName = nodeName
	vmi.Status.ActivePods = map[types.UID]string{n.launcher: nodeName}
	for _, v := range n.vols {
		claim := "claim-" + v.name
		mode := k8sv1.PersistentVolumeFilesystem
		if v.mode == kubevirt.Block {
			mode = k8sv1.PersistentVolumeBlock
		}
		src := v1.VolumeSource{PersistentVolumeClaim: &v1.PersistentVolumeClaimVolumeSource{
			PersistentVolumeClaimVolumeSource: k8sv1.PersistentVolumeClaimVolumeSource{ClaimName: claim}, Hotpluggable: true}}
		st := v1.VolumeStatus{Name: v.name, Phase: v1.HotplugVolumeAttachedToNode,
			HotplugVolume:             &v1.HotplugVolumeStatus{AttachPodName: "hp-" + string(n.attachOf(v)), AttachPodUID: n.attachOf(v)},
			PersistentVolumeClaimInfo: &v1.PersistentVolumeClaimInfo{ClaimName: claim, VolumeMode: &mode}}
		if v.mode == kubevirt.Directory {
			src = v1.VolumeSource{MemoryDump: &v1.MemoryDumpVolumeSource{PersistentVolumeClaimVolumeSource: *src.PersistentVolumeClaim}}
			st.MemoryDumpVolume = &v1.DomainMemoryDumpInfo{ClaimName: claim}
		}
		vmi.Spec.Volumes = append(vmi.Spec.Volumes, v1.Volume{Name: v.name, VolumeSource: src})
		vmi.Status.VolumeStatus = append(vmi.Status.VolumeStatus, st)
	}
	return vmi
}

// mountWithKubeVirt runs virt-handler's mounter as virt-handler does for a
// VMI on its node: a cgroup manager from the launcher found by its command
// socket, then Mount. It returns Mount's error.
func (n *peerNode) mountWithKubeVirt(t *testing.T) error {
	t.Helper()
	vmi := n.vmi()
	m := n.kubeVirtMounter(t)
	err := m.Mount(vmi, n.kvCgroup)
	for _, v := range n.vols {
		ok, ierr := m.IsMounted(vmi, v.name, n.attachOf(v))
		t.Logf("KubeVirt's IsMounted(%s) = %v, %v", v.name, ok, ierr)
	}
	return err
}

// kubeVirtMounter makes KubeVirt's mounter and the launcher's cgroup
// manager once, as virt-handler keeps them (its records live in memory and
// its state directory).
func (n *peerNode) kubeVirtMounter(t *testing.T) hotplugdisk.VolumeMounter {
	t.Helper()
	if n.kvMounter == nil {
		mgr, err := newCgroupManager(n.vmi())
		if err != nil {
			t.Fatalf("KubeVirt's cgroup manager: %v", err)
		}
		n.kvState = t.TempDir()
		n.kvMounter, n.kvCgroup = hotplugdisk.NewVolumeMounter(n.kvState, podsDir, nodeName), mgr
	}
	return n.kvMounter
}

// unmountAllWithKubeVirt is what virt-handler does once the VMI is gone.
func (n *peerNode) unmountAllWithKubeVirt(t *testing.T) error {
	t.Helper()
	return n.kvMounter.UnmountAll(n.vmi(), n.kvCgroup)
}

// mountWithHpmount runs hpmount's node engine (test/peer/hpmountside) on
// the same node: Snapshot, then Attach of each volume. It returns each
// volume's outcome, or its error.
func (n *peerNode) mountWithHpmount(t *testing.T, bin string) map[string]string {
	t.Helper()
	return n.runHpmount(t, bin, "attach")
}

// runHpmount runs hpmountside's op on every volume.
func (n *peerNode) runHpmount(t *testing.T, bin, op string) map[string]string {
	t.Helper()
	req := map[string]any{"op": op, "kubeletRoot": kubeletRoot, "cgroupRoot": n.cgroupRoot, "launcherDir": launcherView}
	if inCgroupV2Node {
		req["cgroupMode"] = "v2"
	}
	var vols []desiredVolume
	for _, v := range n.vols {
		dv := desiredVolume{Name: v.name, Mode: v.mode, LauncherUID: n.launcher}
		dv.Source.AttachmentPodUID, dv.Source.PVName = n.attachOf(v), n.hpmountPV(v)
		if v.mode == kubevirt.Block {
			dv.ComputeContainerID = "containerd://" + computeID
		}
		vols = append(vols, dv)
	}
	req["volumes"] = vols
	in, err := json.Marshal(req)
	must(t, err)
	cmd := exec.Command(bin)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hpmountside: %v: %s", err, stderr.String())
	}
	var res []struct {
		Name, Outcome, Error string
		Grow                 json.RawMessage
	}
	must(t, json.Unmarshal(out, &res))
	outcomes := map[string]string{}
	for _, r := range res {
		t.Logf("hpmount's %s(%s) = %s %s %s", op, r.Name, r.Outcome, r.Grow, r.Error)
		outcomes[r.Name] = r.Outcome
		if r.Error != "" {
			outcomes[r.Name] = "error: " + r.Error
		}
	}
	return outcomes
}

// desiredVolume is agent.DesiredVolume as JSON: the agent package links
// client-go v0.36 APIs, which KubeVirt's pinned v0.33.5 lacks.
type desiredVolume struct {
	Name               string
	Mode               kubevirt.VolumeMode
	LauncherUID        types.UID
	ComputeContainerID string
	Source             struct {
		AttachmentPodUID types.UID
		PVName           string
	}
}

// facts is what the differential compares per volume, each independent
// of which world (loop device, pod UIDs) it was measured in.
type facts struct {
	Target     string // the entry in hotplug-disks
	Kind       string // file bind, directory bind, block node
	SourceSame bool   // the target is the published source (dev and inode)
	Owner      string // uid:gid
	Perm       string
	RdevSame   bool // block: the node's major:minor is the device's
	// CgroupRule, block: v1, the compute container's devices.list line for
	// it; v2, what a process of that cgroup may do with it: open the
	// launcher's node for reading and writing ("vol:rw") and mknod it.
	CgroupRule string
	// Access, block on v2: what a process of the compute container may
	// open besides: /dev/null and /dev/zero (the runtime allowed both) and
	// a block device of no volume; and how many device programs are
	// attached to its cgroup.
	Access      string
	Mounts      int    // mounts on the target in the node's table
	Propagation string // of the top mount on the target
	Launcher    string // what the launcher sees at launcherView/<target>
}

func (n *peerNode) facts(t *testing.T, v peerVolume) facts {
	t.Helper()
	hotplug := filepath.Join(kubeletRoot, kubelet.HotplugDisksDir(string(n.launcher)))
	target := v.name
	if v.mode == kubevirt.Filesystem {
		target += ".img"
	}
	f := facts{Target: target}
	path := filepath.Join(hotplug, target)
	if v.mode == kubevirt.Block && !inCgroupV2Node {
		f.CgroupRule = cgroupLine(t, n.computeCgroup, n.loops[v.name].Dev(t))
	}
	if v.mode == kubevirt.Block && inCgroupV2Node {
		f.CgroupRule, f.Access = n.deviceAccess(t, v, target)
	}
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		f.Target = "missing"
		return f
	}
	f.Owner, f.Perm = fmt.Sprintf("%d:%d", st.Uid, st.Gid), fmt.Sprintf("%04o", st.Mode&0o7777)
	switch st.Mode & unix.S_IFMT {
	case unix.S_IFBLK:
		f.Kind = "block node"
		dev := n.loops[v.name].Dev(t)
		f.RdevSame = st.Rdev == dev
	case unix.S_IFDIR:
		f.Kind = "directory"
	case unix.S_IFREG:
		f.Kind = "file"
	default:
		f.Kind = fmt.Sprintf("mode %o", st.Mode&unix.S_IFMT)
	}
	if v.mode != kubevirt.Block {
		src := n.mountDir(v)
		if v.mode == kubevirt.Filesystem {
			src = filepath.Join(src, "disk.img")
		}
		var sst unix.Stat_t
		f.SourceSame = unix.Stat(src, &sst) == nil && sst.Dev == st.Dev && sst.Ino == st.Ino
	}
	mounts, err := mountinfo.GetMounts(mountinfo.SingleEntryFilter(path))
	must(t, err)
	f.Mounts = len(mounts)
	if len(mounts) > 0 {
		f.Kind += " bind"
		f.Propagation = propagation(mounts[len(mounts)-1].Optional)
	}
	var lst unix.Stat_t
	seen := fmt.Sprintf("/proc/%d/root%s/%s", n.launcherPod.pid(), launcherView, target)
	switch err := unix.Lstat(seen, &lst); {
	case err != nil:
		f.Launcher = "nothing: " + err.Error()
	case lst.Dev == st.Dev && lst.Ino == st.Ino && lst.Rdev == st.Rdev:
		f.Launcher = "the same"
	default:
		f.Launcher = fmt.Sprintf("another file (dev %d ino %d)", lst.Dev, lst.Ino)
	}
	return f
}

// cgroupLine is the compute container's devices.list entry for dev.
func cgroupLine(t *testing.T, dir string, dev uint64) string {
	t.Helper()
	list, err := os.ReadFile(filepath.Join(dir, "devices.list"))
	must(t, err)
	want := fmt.Sprintf("b %d:%d ", unix.Major(dev), unix.Minor(dev))
	for _, line := range strings.Split(string(list), "\n") {
		if strings.HasPrefix(line, want) {
			return strings.Replace(line, want, "b MAJ:MIN ", 1)
		}
	}
	return "none"
}

// propagation names a mount's optional fields without their peer-group
// numbers, which differ between runs.
func propagation(optional string) string {
	if optional == "" {
		return "private"
	}
	var kinds []string
	for _, o := range strings.Fields(optional) {
		k, _, _ := strings.Cut(o, ":")
		kinds = append(kinds, k)
	}
	return strings.Join(kinds, ",")
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// buildHpmountSide builds hpmount's half from the root module, unless
// sideEnv names one built already (from a commit, while the working tree
// is mid-change).
func buildHpmountSide(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv(sideEnv); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "hpmountside")
	cmd := exec.Command("go", "build", "-o", bin, "./test/peer/hpmountside")
	cmd.Dir = "../../.."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build hpmountside: %v: %s", err, out)
	}
	return bin
}

// sideEnv names a prebuilt test/peer/hpmountside.
const sideEnv = "HPMOUNT_PEER_HPMOUNTSIDE"

// difference is one fact a mounter sets otherwise than the other, with
// why; docs/coexistence.md's table lists each.
type difference struct {
	volume, fact, kubevirt, hpmount, why string
}

// knownDifferences are the differences measured on this node. The test
// fails on any other, and on one of these that went away.
var knownDifferences = []difference{
	{"blk", "Perm", "0640", "0600",
		"KubeVirt mknods with the mode of the node the container runtime made in the attachment pod (the host's, 0660 on a node) less its umask; hpmount gives the node to QEMU's user alone"},
	{"nodisk-first", "Target", "nodisk-first.img", "missing",
		"a claim without disk.img: KubeVirt's failed bind leaves the empty <vol>.img it touched (0:0 0644, no mount) in the launcher; hpmount refuses (--create-disk-images creates one) and makes nothing"},
	{"fs-after-nodisk", "Target", "missing", "fs-after-nodisk.img",
		"KubeVirt's Mount returns at the first volume that fails, so the volumes after it wait for that one; hpmount attaches each volume on its own"},
}

// TestDifferential mounts the same volumes of the same VMI once with
// KubeVirt v1.7.0's mounter and once with hpmount's node engine, each on a
// fresh node, and compares per volume the facts in facts.
func TestDifferential(t *testing.T) {
	testutil.RequiresRoot(t)
	bin := buildHpmountSide(t)
	worlds := [][]peerVolume{
		{
			{name: "fs-ext4", mode: kubevirt.Filesystem, fstype: "ext4"},
			{name: "fs-xfs", mode: kubevirt.Filesystem, fstype: "xfs"},
			{name: "blk", mode: kubevirt.Block},
			{name: "dump", mode: kubevirt.Directory, fstype: "ext4"},
		},
		{
			{name: "nodisk-first", mode: kubevirt.Filesystem, fstype: "ext4", noDiskImg: true},
			{name: "fs-after-nodisk", mode: kubevirt.Filesystem, fstype: "ext4"},
		},
	}
	seen := map[difference]bool{}
	for i, vols := range worlds {
		kv := newPeerNode(t, fmt.Sprintf("kv%d", i), vols)
		kvErr := kv.mountWithKubeVirt(t)
		t.Logf("KubeVirt's Mount: %v", kvErr)
		hp := newPeerNode(t, fmt.Sprintf("hp%d", i), vols)
		hp.mountWithHpmount(t, bin)
		for _, v := range vols {
			k, h := kv.facts(t, v), hp.facts(t, v)
			t.Logf("%s KubeVirt: %+v", v.name, k)
			t.Logf("%s hpmount:  %+v", v.name, h)
			for _, d := range diff(v.name, k, h) {
				if !isKnown(d) {
					t.Errorf("unlisted difference: %s %s: KubeVirt %q, hpmount %q", d.volume, d.fact, d.kubevirt, d.hpmount)
				}
				seen[difference{volume: d.volume, fact: d.fact, kubevirt: d.kubevirt, hpmount: d.hpmount}] = true
			}
		}
	}
	for _, d := range knownDifferences {
		if !seen[difference{volume: d.volume, fact: d.fact, kubevirt: d.kubevirt, hpmount: d.hpmount}] {
			t.Errorf("listed difference no longer measured: %s %s: KubeVirt %q, hpmount %q", d.volume, d.fact, d.kubevirt, d.hpmount)
		}
	}
}

// diff lists the facts that differ; only the target when one side has
// none.
func diff(volume string, k, h facts) []difference {
	if k.Target != h.Target {
		return []difference{{volume: volume, fact: "Target", kubevirt: k.Target, hpmount: h.Target}}
	}
	var out []difference
	kv, hv := reflect.ValueOf(k), reflect.ValueOf(h)
	for i := range kv.NumField() {
		a, b := fmt.Sprint(kv.Field(i).Interface()), fmt.Sprint(hv.Field(i).Interface())
		if a != b {
			out = append(out, difference{volume: volume, fact: kv.Type().Field(i).Name, kubevirt: a, hpmount: b})
		}
	}
	return out
}

func isKnown(d difference) bool {
	for _, k := range knownDifferences {
		if k.volume == d.volume && k.fact == d.fact && k.kubevirt == d.kubevirt && k.hpmount == d.hpmount {
			return true
		}
	}
	return false
}
