// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package peer

import (
	"fmt"
	"testing"
	"unsafe"

	runcfs2 "github.com/opencontainers/runc/libcontainer/cgroups/fs2"
	"github.com/opencontainers/runc/libcontainer/configs"
	"github.com/opencontainers/runc/libcontainer/devices"
	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/kubevirt"
)

// runtimeDevicesV2 does to the compute container's cgroup what runc does
// when it creates a container on cgroup v2: it attaches the device program
// of a deny-all list that allows /dev/null and /dev/zero.
func runtimeDevicesV2(dir string) error {
	r := &configs.Resources{Devices: []*devices.Rule{
		{Type: devices.WildcardDevice, Major: devices.Wildcard, Minor: devices.Wildcard, Permissions: "rwm", Allow: false},
		{Type: devices.CharDevice, Major: 1, Minor: 3, Permissions: "rwm", Allow: true},
		{Type: devices.CharDevice, Major: 1, Minor: 5, Permissions: "rwm", Allow: true},
	}}
	m, err := runcfs2.NewManager(&configs.Cgroup{Resources: r}, dir)
	if err != nil {
		return fmt.Errorf("runc's cgroup v2 manager for %q: %w", dir, err)
	}
	if err := m.Set(r); err != nil {
		return fmt.Errorf("runc's device program on %q: %w", dir, err)
	}
	return nil
}

// deviceAccess is the v2 device facts of block volume v: what a process
// of the compute container may do with the launcher's node at target, and
// with the other devices (see facts.Access).
func (n *peerNode) deviceAccess(t *testing.T, v peerVolume, target string) (rule, access string) {
	t.Helper()
	seen := fmt.Sprintf("/proc/%d/root%s/%s", n.launcherPod.pid(), launcherView, target)
	rule = probeAccess(t, n.computeCgroup, n.loops[v.name].Dev(t), [2]string{"vol", seen})
	access = probeAccess(t, n.computeCgroup, n.other.Dev(t),
		[2]string{"null", "/dev/null"}, [2]string{"zero", "/dev/zero"}, [2]string{"other", n.other.Device})
	return rule, fmt.Sprintf("%s programs:%d", access, devicePrograms(t, n.computeCgroup))
}

// devicePrograms counts the device programs attached to cgroup dir
// (BPF_PROG_QUERY; the peer module's cilium/ebpf, pinned old for runc,
// has no query of its own).
func devicePrograms(t *testing.T, dir string) int {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	defer unix.Close(fd)
	var ids [64]uint32
	attr := struct {
		targetFD, attachType, queryFlags, attachFlags uint32
		progIDs                                       uint64
		progCount                                     uint32
		_                                             uint32
	}{targetFD: uint32(fd), attachType: unix.BPF_CGROUP_DEVICE, progIDs: uint64(uintptr(unsafe.Pointer(&ids[0]))), progCount: uint32(len(ids))}
	if _, _, errno := unix.Syscall(unix.SYS_BPF, unix.BPF_PROG_QUERY, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr)); errno != 0 {
		t.Fatalf("query device programs of %q: %v", dir, errno)
	}
	return int(attr.progCount)
}

// knownDifferencesV2 are the differences measured on the cgroup v2 node,
// beyond those of knownDifferences that hold there too.
var knownDifferencesV2 = []difference{
	{"blk", "Access", "null:rw zero:-- other:-- mknod:- programs:1", "null:rw zero:rw other:-- mknod:- programs:1",
		"KubeVirt's v2 manager (runc's fs2 through virt-chroot) replaces the container's device program with one of its own list (its defaults, the VMI's disks, the hotplugged nodes): /dev/zero, which the runtime allowed, is refused from the first block hotplug on; hpmount puts its rule in front of the runtime's program and keeps the rest"},
}

// TestDifferentialCgroupV2 is TestDifferential on a node whose
// /sys/fs/cgroup is the cgroup2 hierarchy, where KubeVirt uses its v2
// cgroup manager (runc's fs2 through virt-chroot: it replaces the
// container's device program with one of its own list) and hpmount its
// V2 rules (it rewraps the runtime's program with a prefix allowing the
// device). The rule is compared by what a process in the compute
// container's cgroup may do: open the launcher's node for reading and
// writing, mknod it, open the devices the runtime allowed and one it did
// not.
func TestDifferentialCgroupV2(t *testing.T) {
	testutil.RequiresRoot(t)
	if !inCgroupV2Node {
		runInCgroupV2Node(t)
		return
	}
	bin := buildHpmountSide(t)
	vols := []peerVolume{
		{name: "fs-ext4", mode: kubevirt.Filesystem, fstype: "ext4"},
		{name: "blk", mode: kubevirt.Block},
		{name: "dump", mode: kubevirt.Directory, fstype: "ext4"},
	}
	kv := newPeerNode(t, "kv2", vols)
	before := probeAccess(t, kv.computeCgroup, kv.other.Dev(t), [2]string{"null", "/dev/null"}, [2]string{"zero", "/dev/zero"}, [2]string{"other", kv.other.Device})
	if want := "null:rw zero:rw other:-- mknod:-"; before != want {
		t.Fatalf("the runtime's program alone lets the container do %q, want %q", before, want)
	}
	must(t, kv.mountWithKubeVirt(t))
	if got := kv.kvCgroup.GetCgroupVersion(); got != "v2" {
		t.Fatalf("KubeVirt's cgroup manager is %s, want v2", got)
	}
	hp := newPeerNode(t, "hp2", vols)
	hp.mountWithHpmount(t, bin)
	seen := map[difference]bool{}
	all := append(append([]difference{}, knownDifferences...), knownDifferencesV2...)
	for _, v := range vols {
		k, h := kv.facts(t, v), hp.facts(t, v)
		t.Logf("%s KubeVirt: %+v", v.name, k)
		t.Logf("%s hpmount:  %+v", v.name, h)
		for _, d := range diff(v.name, k, h) {
			if !listed(all, d) {
				t.Errorf("unlisted difference: %s %s: KubeVirt %q, hpmount %q", d.volume, d.fact, d.kubevirt, d.hpmount)
			}
			seen[difference{volume: d.volume, fact: d.fact, kubevirt: d.kubevirt, hpmount: d.hpmount}] = true
		}
	}
	for _, d := range knownDifferencesV2 {
		if !seen[difference{volume: d.volume, fact: d.fact, kubevirt: d.kubevirt, hpmount: d.hpmount}] {
			t.Errorf("listed difference no longer measured: %s %s: KubeVirt %q, hpmount %q", d.volume, d.fact, d.kubevirt, d.hpmount)
		}
	}
}

func listed(list []difference, d difference) bool {
	for _, k := range list {
		if k.volume == d.volume && k.fact == d.fact && k.kubevirt == d.kubevirt && k.hpmount == d.hpmount {
			return true
		}
	}
	return false
}
