// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/asm"
	"github.com/cilium/ebpf/link"
	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/blockdev"
	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubelet"
)

// hotplugDisks is where the test container sees hpmount's node, as
// virt-launcher's compute container does.
const hotplugDisks = "/var/run/kubevirt/hotplug-disks"

// runcCase is one cgroup mode runc can run a container in on this machine.
type runcCase struct {
	name string
	// unified runs runc with the cgroup2 hierarchy at /sys/fs/cgroup.
	unified bool
	// hierarchy is where the container's cgroup is seen from here.
	hierarchy string
	mode      blockdev.CgroupMode
	// read returns what the kernel holds for the container's cgroup.
	read func(t *testing.T, dir string) seenRules
	// update runs `runc update` of the container and checks that it did
	// what it was asked.
	update func(t *testing.T, ctx context.Context, r Runc, id, rel string)
	// rewrite puts back runc's own rules without hpmount's, as a runtime
	// rewriting a container's device rules does.
	rewrite func(t *testing.T, dir string, runc seenRules, dev blockdev.Device)
}

var runcCases = []runcCase{
	{
		name: "cgroup v2 device program", unified: true,
		hierarchy: "/sys/fs/cgroup/unified", mode: blockdev.CgroupV2,
		read: readV2, update: updateV2, rewrite: rewriteV2,
	},
	{
		name:      "cgroup v1 devices controller",
		hierarchy: "/sys/fs/cgroup/devices", mode: blockdev.CgroupV1,
		read: readV1, update: updateV1, rewrite: rewriteV1,
	},
}

// TestRuncDeviceRules starts one container with runc directly per cgroup
// mode, in a cgroup laid out as the kubelet and containerd lay it out
// (kubepods/besteffort/pod<uid>/<container id>), and checks hpmount's
// device rules against the ones runc really made: the container cannot
// open a loop device's node before Allow, can after it, keeps it across
// `runc update` (or gets it back from the engine's resync), and Deny leaves
// runc's own rules exactly as runc made them.
func TestRuncDeviceRules(t *testing.T) {
	testutil.RequiresRoot(t)
	for _, tc := range runcCases {
		t.Run(tc.name, func(t *testing.T) { testRuncDeviceRules(t, tc) })
	}
}

// runcTimeout bounds every runc call of a case; each takes tens of
// milliseconds.
const runcTimeout = time.Minute

func testRuncDeviceRules(t *testing.T, tc runcCase) {
	ctx, cancel := context.WithTimeout(context.Background(), runcTimeout)
	defer cancel()
	f := startRuncContainer(t, ctx, tc)
	dir := filepath.Join(tc.hierarchy, f.rel)

	runc := tc.read(t, dir)
	t.Logf("runc's rules on %s: %s", dir, runc)
	if runc.grants(f.dev) {
		t.Fatalf("runc's own rules already grant %s: %s", f.dev, runc)
	}
	mustAllowed(t, f, false)
	f.ensureNode(t)
	mustRead(t, ctx, f, false, "before Allow")

	if err := f.rules.Allow(f.ctr, f.dev); err != nil {
		t.Fatalf("Allow: %v", err)
	}
	mustAllowed(t, f, true)
	mustRead(t, ctx, f, true, "after Allow")
	wrapped := tc.read(t, dir)
	t.Logf("after Allow: %s", wrapped)
	if !wrapped.grants(f.dev) || !wrapped.keeps(runc) {
		t.Fatalf("after Allow: %s, want runc's rules kept and %s added", wrapped, f.dev)
	}

	checkUpdateAndResync(t, ctx, f, tc, runc)

	if err := f.rules.Deny(f.ctr.PodUID, f.dev); err != nil {
		t.Fatalf("Deny: %v", err)
	}
	restored := tc.read(t, dir)
	t.Logf("after Deny: %s", restored)
	if !restored.same(runc) {
		t.Fatalf("after Deny: %s, want runc's own rules %s", restored, runc)
	}
	mustAllowed(t, f, false)
	mustRead(t, ctx, f, false, "after Deny")
}

// checkUpdateAndResync runs `runc update` of the container and reports
// whether hpmount's rule survived it. A rule that did not must come back
// from the engine's resync; when it did, the rule is taken away as a
// runtime rewriting the container's rules takes it (what does that here,
// the systemd driver reapplying a unit, kubevirt#14825, is not on this
// node), and the resync must bring that back. The engine's watch of the
// container's rules (blockdev.RuleWatch) must see whichever took the rule
// away, runc's own update included: that is what brings the verify at
// once instead of at the resync.
func checkUpdateAndResync(t *testing.T, ctx context.Context, f *runcFixture, tc runcCase, runc seenRules) {
	t.Helper()
	dir := filepath.Join(tc.hierarchy, f.rel)
	w, err := f.rules.Watch(f.ctr)
	if err != nil {
		t.Fatalf("watch: %v", err)
	}
	defer w.Close()
	before := tc.read(t, dir)
	tc.update(t, ctx, f.runc, f.id, f.rel)
	after := tc.read(t, dir)
	survived := after.grants(f.dev)
	t.Logf("runc update: hpmount's rule survived=%v; before %s; after %s", survived, before, after)
	mustRead(t, ctx, f, survived, "after runc update")
	if survived {
		if f.resync(t) {
			t.Fatal("resync granted the device again although runc update kept the rule")
		}
		_, _ = w.Changed() // runc may have rewritten the rules, keeping ours
		tc.rewrite(t, dir, runc, f.dev)
		t.Logf("rules rewritten as a runtime would: %s", tc.read(t, dir))
		mustRead(t, ctx, f, false, "after the rules were rewritten")
	}
	if changed, err := w.Changed(); err != nil || !changed {
		t.Fatalf("the watch of the container's rules saw no change after the rule was lost (%v)", err)
	}
	if !f.resync(t) {
		t.Fatal("resync granted nothing after the rule was lost")
	}
	mustRead(t, ctx, f, true, "after resync")
}

// runcFixture is one running runc container and hpmount's view of it.
type runcFixture struct {
	runc   Runc
	id     string
	rel    string // the container's cgroup, from the hierarchy's root
	bundle string
	dev    blockdev.Device
	ctr    blockdev.Container
	rules  blockdev.DeviceRules
	nodes  *blockdev.Nodes
}

// nodeDir is the container's hotplug-disks, relative to the bundle.
const nodeDir = "rootfs" + hotplugDisks

const nodeName = "blockvol"

func startRuncContainer(t *testing.T, ctx context.Context, tc runcCase) *runcFixture {
	t.Helper()
	loop := testutil.NewLoop(t, 16<<20)
	rdev := loop.Dev(t)
	top, uid, id := "hpmount-runc-"+randomHex(t, 6), "runc-"+randomHex(t, 8), randomHex(t, 32)
	f := &runcFixture{
		runc:   Runc{StateDir: t.TempDir(), Unified: tc.unified},
		id:     id,
		rel:    "/" + top + "/kubepods/besteffort/pod" + uid + "/" + id,
		bundle: t.TempDir(),
		dev:    blockdev.Device{Major: unix.Major(rdev), Minor: unix.Minor(rdev)},
		ctr:    blockdev.Container{PodUID: uid, ID: "containerd://" + id},
	}
	if err := WriteBundle(f.bundle, f.rel); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(f.bundle, nodeDir), 0o755); err != nil {
		t.Fatal(err)
	}
	// Cleanups run last first: the container goes before its cgroups.
	t.Cleanup(func() { removeCgroupTrees(t, top) })
	if err := f.runc.Start(ctx, f.bundle, id); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), runcTimeout)
		defer cancel()
		if err := f.runc.Delete(ctx, id); err != nil {
			t.Error(err)
		}
	})
	checkInCgroup(t, ctx, f, tc)
	rules, err := blockdev.NewDeviceRules(tc.mode, filepath.Join(tc.hierarchy, top))
	if err != nil {
		t.Fatal(err)
	}
	f.rules = rules
	ns, err := isolation.OpenMountNamespace("/proc/self/ns/mnt")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(ns.Close)
	f.nodes = &blockdev.Nodes{NS: ns, Root: kubelet.Root{Path: f.bundle, Configured: f.bundle}, UID: QEMUUser, GID: QEMUUser}
	return f
}

// checkInCgroup checks that runc put the container's init in the cgroup
// it was given, in the hierarchy the case expects.
func checkInCgroup(t *testing.T, ctx context.Context, f *runcFixture, tc runcCase) {
	t.Helper()
	pid, err := f.runc.Pid(ctx, f.id)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	want := "0::" + f.rel
	if !tc.unified {
		want = ":devices:" + f.rel
	}
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasSuffix(line, want) {
			return
		}
	}
	t.Fatalf("container init %d is not in %q:\n%s", pid, want, b)
}

// hotplugDisks opens the container's hotplug-disks for blockdev, which
// works on a descriptor (the engine opens it through mount.InLauncherDir;
// a runc bundle is no kubelet pods directory, so it is opened plainly).
func (f *runcFixture) hotplugDisks(t *testing.T) *os.File {
	t.Helper()
	d, err := os.Open(filepath.Join(f.bundle, nodeDir))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { d.Close() })
	return d
}

// ensureNode makes the block node in the container's hotplug-disks, as
// the engine does for a published block volume.
func (f *runcFixture) ensureNode(t *testing.T) {
	t.Helper()
	if _, _, err := f.nodes.Ensure(f.hotplugDisks(t), nodeName, blockdev.Published{Device: f.dev, Perm: 0o660}); err != nil {
		t.Fatalf("Ensure: %v", err)
	}
}

// resync does what the engine's periodic resync does for a block node
// whose volume the attachment pod no longer publishes (engine.Engine's
// keepBlock): confirm the node still names the disk it was made for, and
// grant the rule again when it is not in effect. It reports whether it
// granted.
func (f *runcFixture) resync(t *testing.T) bool {
	t.Helper()
	dev, err := f.nodes.Recheck(f.hotplugDisks(t), nodeName)
	if err != nil {
		t.Fatalf("Recheck: %v", err)
	}
	if dev != f.dev {
		t.Fatalf("Recheck: node names %s, want %s", dev, f.dev)
	}
	allowed, err := f.rules.Allowed(f.ctr, dev)
	if err != nil {
		t.Fatalf("Allowed: %v", err)
	}
	if allowed {
		return false
	}
	if err := f.rules.Allow(f.ctr, dev); err != nil {
		t.Fatalf("Allow: %v", err)
	}
	return true
}

func mustAllowed(t *testing.T, f *runcFixture, want bool) {
	t.Helper()
	got, err := f.rules.Allowed(f.ctr, f.dev)
	if err != nil {
		t.Fatalf("Allowed: %v", err)
	}
	if got != want {
		t.Fatalf("Allowed = %v, want %v", got, want)
	}
}

// mustRead reads the first 4 KiB of the node inside the container, as
// QEMU's user, and checks that it can (or that the device cgroup refuses).
func mustRead(t *testing.T, ctx context.Context, f *runcFixture, want bool, step string) {
	t.Helper()
	out, err := f.runc.Run(ctx, "exec", "--user", "107:107", f.id,
		"/bin/busybox", "dd", "if="+hotplugDisks+"/"+nodeName, "of=/dev/null", "bs=4k", "count=1")
	switch {
	case want && err != nil:
		t.Fatalf("%s: the container cannot read the node: %v", step, err)
	case want && !strings.Contains(out, "1+0 records in"):
		t.Fatalf("%s: dd read nothing: %s", step, out)
	case !want && err == nil:
		t.Fatalf("%s: the container read the node: %s", step, out)
	case !want && !strings.Contains(err.Error(), "Operation not permitted"):
		t.Fatalf("%s: want EPERM from the device cgroup, got %v", step, err)
	}
}

func randomHex(t *testing.T, n int) string {
	t.Helper()
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// removeCgroupTrees removes the cgroup directory top and everything below
// it from every hierarchy mounted under /sys/fs/cgroup: runc makes the
// container's parents in each and removes only the container's own.
func removeCgroupTrees(t *testing.T, top string) {
	t.Helper()
	hierarchies, err := filepath.Glob("/sys/fs/cgroup/*/" + top)
	if err != nil {
		t.Error(err)
		return
	}
	for _, h := range hierarchies {
		var dirs []string
		_ = filepath.WalkDir(h, func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				dirs = append(dirs, p)
			}
			return nil
		})
		for i := len(dirs) - 1; i >= 0; i-- {
			if err := unix.Rmdir(dirs[i]); err != nil && !errors.Is(err, unix.ENOENT) {
				t.Errorf("remove cgroup %q: %v", dirs[i], err)
			}
		}
	}
}

// seenRules is what the kernel holds for one container cgroup's devices.
type seenRules interface {
	String() string
	// grants reports whether hpmount's rule for dev is in effect.
	grants(dev blockdev.Device) bool
	// keeps reports whether runc's own rules are all still there,
	// unchanged.
	keeps(runc seenRules) bool
	// same reports whether these are exactly runc's rules.
	same(runc seenRules) bool
}

// v2Rules is the one device program attached to a container cgroup: runc
// attaches one, and hpmount replaces it in place.
type v2Rules struct {
	id, flags uint32
	insns     asm.Instructions
	// devs is hpmount's prefix, body the program below it.
	devs []blockdev.Device
	body asm.Instructions
}

func readV2(t *testing.T, dir string) seenRules {
	t.Helper()
	progs, err := blockdev.AttachedDevicePrograms(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(progs) != 1 {
		t.Fatalf("cgroup %q has %d device programs, want 1", dir, len(progs))
	}
	p := progs[0]
	devs, body, err := blockdev.UnwrapDeviceProgram(p.Instructions)
	if err != nil {
		t.Fatalf("device program %d on %q: %v", p.ID, dir, err)
	}
	return v2Rules{id: p.ID, flags: p.AttachFlags, insns: p.Instructions, devs: devs, body: body}
}

func (r v2Rules) String() string {
	return fmt.Sprintf("program id %d (attach flags %#x, %d instructions, hpmount's prefix %v)", r.id, r.flags, len(r.insns), r.devs)
}

func (r v2Rules) grants(dev blockdev.Device) bool { return slices.Contains(r.devs, dev) }

func (r v2Rules) keeps(runc seenRules) bool {
	o := runc.(v2Rules)
	return r.flags == o.flags && sameInstructions(r.body, o.insns)
}

func (r v2Rules) same(runc seenRules) bool {
	o := runc.(v2Rules)
	return r.flags == o.flags && len(r.devs) == 0 && sameInstructions(r.insns, o.insns)
}

// sameInstructions compares two programs as the kernel returned them,
// instruction by instruction.
func sameInstructions(a, b asm.Instructions) bool {
	return slices.EqualFunc(a, b, func(x, y asm.Instruction) bool {
		return x.OpCode == y.OpCode && x.Dst == y.Dst && x.Src == y.Src && x.Offset == y.Offset && x.Constant == y.Constant
	})
}

// updateV2 makes the only update runc can make to a cgroup2 container on
// this machine, which delegates no controller but hugetlb to cgroup2
// (--memory, --pids-limit and --cpuset-cpus fail: their files do not
// exist): an empty resources file. runc still goes through the same
// Set of the container's cgroup.
func updateV2(t *testing.T, ctx context.Context, r Runc, id, _ string) {
	t.Helper()
	res := filepath.Join(t.TempDir(), "resources.json")
	if err := os.WriteFile(res, []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Run(ctx, "update", "--resources", res, id); err != nil {
		t.Fatal(err)
	}
}

// rewriteV2 loads runc's own program again and swaps it in for the one
// attached, as runc does whenever it sets a container's device rules: its
// LoadAttachCgroupDeviceFilter replaces the one program it finds
// (BPF_F_ALLOW_MULTI|BPF_F_REPLACE).
func rewriteV2(t *testing.T, dir string, runc seenRules, _ blockdev.Device) {
	t.Helper()
	cur := readV2(t, dir).(v2Rules)
	old, err := ebpf.NewProgramFromID(ebpf.ProgramID(cur.id))
	if err != nil {
		t.Fatal(err)
	}
	defer old.Close()
	prog, err := ebpf.NewProgram(&ebpf.ProgramSpec{Type: ebpf.CGroupDevice, Instructions: runc.(v2Rules).insns, License: "Apache"})
	if err != nil {
		t.Fatal(err)
	}
	defer prog.Close()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	err = link.RawAttachProgram(link.RawAttachProgramOptions{
		Target: fd, Program: prog, Attach: ebpf.AttachCGroupDevice,
		Flags: unix.BPF_F_ALLOW_MULTI, Anchor: link.ReplaceProgram(old),
	})
	if err != nil {
		t.Fatalf("replace device program %d on %q: %v", cur.id, dir, err)
	}
}

// v1Rules is a v1 devices cgroup's devices.list.
type v1Rules []string

func readV1(t *testing.T, dir string) seenRules {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "devices.list"))
	if err != nil {
		t.Fatal(err)
	}
	return v1Rules(strings.FieldsFunc(string(b), func(r rune) bool { return r == '\n' }))
}

func (r v1Rules) String() string { return strings.Join(r, ", ") }

func (r v1Rules) grants(dev blockdev.Device) bool {
	return slices.Contains(r, fmt.Sprintf("b %d:%d rwm", dev.Major, dev.Minor))
}

func (r v1Rules) keeps(runc seenRules) bool {
	for _, l := range runc.(v1Rules) {
		if !slices.Contains(r, l) {
			return false
		}
	}
	return true
}

func (r v1Rules) same(runc seenRules) bool {
	return slices.Equal(slices.Sorted(slices.Values(r)), slices.Sorted(slices.Values(runc.(v1Rules))))
}

// updateV1 changes the container's memory limit, as the kubelet's
// resource updates do, and checks that the limit changed.
func updateV1(t *testing.T, ctx context.Context, r Runc, id, rel string) {
	t.Helper()
	const limit = "268435456"
	if _, err := r.Run(ctx, "update", "--memory", limit, id); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join("/sys/fs/cgroup/memory", rel, "memory.limit_in_bytes"))
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.TrimSpace(string(b)); got != limit {
		t.Fatalf("memory.limit_in_bytes after runc update = %s, want %s", got, limit)
	}
}

// rewriteV1 denies the device in the container's cgroup, as runc does
// whenever it sets a container's device rules: its device emulator writes
// a deny for every rule that is not in runc's own list.
func rewriteV1(t *testing.T, dir string, _ seenRules, dev blockdev.Device) {
	t.Helper()
	rule := fmt.Sprintf("b %d:%d rwm", dev.Major, dev.Minor)
	if err := os.WriteFile(filepath.Join(dir, "devices.deny"), []byte(rule), 0); err != nil {
		t.Fatal(err)
	}
}
