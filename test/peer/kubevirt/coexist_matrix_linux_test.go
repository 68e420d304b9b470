// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package peer

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/mount"
)

// coStep is one VMI change both mounters sync.
type coStep struct {
	name string
	// change changes the node and the spec before the step; it is not
	// measured.
	change func(t *testing.T, n *coNode)
	// kubevirt is virt-handler's part (coNode.kubeVirtSync if nil).
	kubevirt func(n *coNode) error
	// hpmount are the agent's ops ("sync" if nil).
	hpmount []string
	// mounts is how many mounts the step adds or removes in the node's
	// table: the bound on its changing syscalls that the table shows.
	mounts int
	// targets is how many targets (any kind, any launcher) the step
	// adds or removes: hpmount's changing syscalls are at most
	// perTarget per target, whichever mounter goes first.
	targets int
	// check checks more after the step.
	check func(t *testing.T, n *coNode)
}

// Orders of one step: which mounter syncs first, one inside the other's
// check-then-act, or both at once.
const (
	kubevirtFirst = "kubevirt-first"
	hpmountFirst  = "hpmount-first"
	// hpmountInside: hpmount's whole pass runs where virt-handler has
	// looked at a target and not yet mounted or unmounted it (the first
	// such virt-chroot call of its sync waits: kubeVirtPaused).
	hpmountInside = "hpmount-inside"
	// kubevirtInside: virt-handler's whole sync runs where hpmount has
	// looked at the node and not yet acted (hpmountPaused).
	kubevirtInside = "kubevirt-inside"
	// concurrent starts both at once, virt-handler after a seeded delay:
	// which interleaving it gets depends on timing, so only make
	// peer-soak runs it (HPMOUNT_PEER_CONCURRENT=1).
	concurrent = "concurrent"
)

// interleaved reports whether order runs one mounter within the other's
// pass, where both may find a target empty and both bind it.
func interleaved(order string) bool {
	return order == hpmountInside || order == kubevirtInside || order == concurrent
}

// matrixOrders are the orders TestCoexistenceMatrix runs, and those its
// seeded mode draws from: the four that do not depend on timing, and
// with HPMOUNT_PEER_CONCURRENT=1 also both at once.
func matrixOrders() []string {
	orders := []string{kubevirtFirst, hpmountFirst, hpmountInside, kubevirtInside}
	if os.Getenv("HPMOUNT_PEER_CONCURRENT") == "1" {
		orders = append(orders, concurrent)
	}
	return orders
}

// coRow is one measured cell of the matrix.
type coRow struct {
	step, order, outcome string
	mountsPerTarget      string
	dataIntact           bool
	churn, hpSyscalls    int
	kvErrors, hpErrors   int
	findings             string
}

// TestCoexistenceMatrix drives KubeVirt v1.7.0's mounter and hpmount's
// engine through one VMI's life on one node: hotplug, unplug, attachment
// pod replacement, resize after it, virt-handler restarting, a migration
// to a launcher on the same node and its end, and the VMI's deletion.
// Each subtest is one order at every step (matrixOrders: each mounter
// first, each inside the other's check-then-act, forced by a seam, and
// under make peer-soak both at once), and a seeded choice per step
// (HPMOUNT_PEER_SEED replays it). Without the concurrent order no verdict
// depends on timing. After each step the node holds exactly
// the spec, with one mount per target, the marker written through the
// launcher before the step reads back through every launcher after it,
// the node's table changed by exactly the step's mounts, and a second
// sync of both changes nothing and logs no error: neither loops.
func TestCoexistenceMatrix(t *testing.T) {
	testutil.RequiresRoot(t)
	coexistenceMatrix(t)
}

// TestCoexistenceMatrixV2 is TestCoexistenceMatrix on a cgroup v2 node,
// where both mounters allow block volumes through the compute
// container's device program, and virt-handler's replaces it whole.
func TestCoexistenceMatrixV2(t *testing.T) {
	testutil.RequiresRoot(t)
	if !inCgroupV2Node {
		runInCgroupV2Node(t)
		return
	}
	coexistenceMatrix(t)
}

func coexistenceMatrix(t *testing.T) {
	seed := time.Now().UnixNano()
	if s := os.Getenv("HPMOUNT_PEER_SEED"); s != "" {
		var err error
		seed, err = strconv.ParseInt(s, 10, 64)
		must(t, err)
	}
	t.Logf("seed %d; replay with HPMOUNT_PEER_SEED=%d", seed, seed)
	rng := rand.New(rand.NewSource(seed))
	var rows []coRow
	orders := matrixOrders()
	for i, mode := range append(slices.Clone(orders), "seeded") {
		t.Run(mode, func(t *testing.T) {
			n := newCoNode(t, fmt.Sprintf("m%d", i), []peerVolume{
				{name: "fs", mode: kubevirt.Filesystem, fstype: "xfs"},
				{name: "ext", mode: kubevirt.Filesystem, fstype: "ext4"},
				{name: "blk", mode: kubevirt.Block},
				{name: "dump", mode: kubevirt.Directory, fstype: "ext4"},
			})
			n.rng = rng
			for _, st := range matrixSteps() {
				order := mode
				if mode == "seeded" {
					order = orders[rng.Intn(len(orders))]
					// Where in virt-handler's sync hpmount's pass
					// runs: before its first, second or third mount
					// or umount.
					n.seamSkip = rng.Intn(3)
				}
				row := runCoStep(t, n, st, order)
				row.order = mode + "/" + order
				if order == hpmountInside && n.seamSkip > 0 {
					row.order += fmt.Sprintf(" (after %d)", n.seamSkip)
				}
				if order == concurrent {
					row.order += fmt.Sprintf(" (KubeVirt +%v)", n.lastDelay)
				}
				rows = append(rows, row)
				if t.Failed() {
					return
				}
			}
		})
	}
	t.Logf("matrix (step | order | outcome | mounts per target | data intact | node mounts changed | hpmount changing syscalls | KubeVirt errors | hpmount errors | findings):")
	for _, r := range rows {
		t.Logf("| %s | %s | %s | %s | %v | %d | %d | %d | %d | %s |", r.step, r.order, r.outcome, r.mountsPerTarget,
			r.dataIntact, r.churn, r.hpSyscalls, r.kvErrors, r.hpErrors, r.findings)
	}
}

// perTarget bounds hpmount's changing syscalls per target a step adds or
// removes (countTraced): a bind is its target's exclusive create
// (openat O_CREAT, or mkdirat), open_tree, mount_setattr, move_mount and
// fchownat; a block node mknodat, fchownat and the write of its device
// rule; a removal umount2 and unlinkat, and the write that drops a rule.
const perTarget = 5

// matrixSteps are the VMI's life, in order, on a node of volumes fs
// (xfs), ext (ext4), blk (block) and dump (memory dump, ext4).
func matrixSteps() []coStep {
	var fsBefore int64
	return []coStep{
		{name: "hotplug", mounts: 3, targets: 4},
		{name: "unplug ext, blk", mounts: 1, targets: 2, change: func(t *testing.T, n *coNode) {
			n.vols = n.vols[:0:0]
			for _, v := range []string{"fs", "dump"} {
				n.vols = append(n.vols, n.volume(v))
			}
		}},
		{name: "attachment pod replaced", change: func(t *testing.T, n *coNode) {
			old, repl := n.attach, types.UID(n.prefix+"-attach2")
			n.addAttachPod(t, repl)
			n.unpublish(t, old)
			n.attach, n.attachPodOf[n.launcher] = repl, repl
		}},
		{name: "resize after replacement, kubelet grows", hpmount: []string{"sync", "grow"},
			change: func(t *testing.T, n *coNode) {
				// The new pod publishes the claim: the kubelet's
				// NodeExpandVolume grows the filesystem there.
				fsBefore = fsBytes(t, targetPath(n.launcher, n.volume("fs")))
				n.loops["fs"].Grow(t, 2*testutil.MinXFSSize)
				testutil.Run(t, "xfs_growfs", n.mountDirIn(n.attach, n.volume("fs")))
			},
			check: func(t *testing.T, n *coNode) { checkGrown(t, n, fsBefore, 2*testutil.MinXFSSize) }},
		{name: "resize, claim no longer published", hpmount: []string{"sync", "grow"},
			change: func(t *testing.T, n *coNode) {
				// Reference 004: the attachment pod no longer carries
				// the claim, so no NodeExpandVolume runs for it.
				// NodeUnpublishVolume unmounts and removes the mount dir.
				mnt := n.mountDirIn(n.attach, n.volume("fs"))
				must(t, unix.Unmount(mnt, unix.MNT_DETACH))
				must(t, os.Remove(mnt))
				fsBefore = fsBytes(t, targetPath(n.launcher, n.volume("fs")))
				n.loops["fs"].Grow(t, 3*testutil.MinXFSSize)
			},
			check: func(t *testing.T, n *coNode) { checkGrown(t, n, fsBefore, 3*testutil.MinXFSSize) }},
		{name: "both restarted", change: func(t *testing.T, n *coNode) { n.restartKubeVirt() }},
		{name: "migration target on the node", mounts: 2, targets: 2, change: func(t *testing.T, n *coNode) {
			target := types.UID(n.prefix + "-launcher2")
			n.addLauncher(t, target)
			attach := types.UID(n.prefix + "-attach3")
			n.addAttachPod(t, attach)
			n.attachPodOf[target], n.migration = attach, target
		}},
		{name: "migration done", mounts: 2, targets: 2, change: func(t *testing.T, n *coNode) {
			src, dst := n.launcher, n.migration
			n.gone = append(n.gone, src)
			n.launcher, n.launcherPod, n.attach, n.migration = dst, n.launchers[dst], n.attachPodOf[dst], ""
			n.computeCgroup = filepath.Join(n.cgroupRoot, "kubepods", "pod"+string(dst), n.computeID(dst))
		}},
		{name: "VMI deleted", mounts: 2, targets: 2,
			change: func(t *testing.T, n *coNode) {
				n.gone = append(n.gone, n.launcher)
				n.deleted = true
			},
			kubevirt: (*coNode).kubeVirtCleanup},
	}
}

// checkGrown checks that fs, seen through the launcher, grew from before
// to about the device's size.
func checkGrown(t *testing.T, n *coNode, before, device int64) {
	t.Helper()
	after := fsBytes(t, seenPath(n.launcherPod, n.volume("fs")))
	if after <= before || after < device*3/4 {
		t.Errorf("fs through the launcher: %d -> %d bytes on a %d-byte device", before, after, device)
	}
	t.Logf("fs through the launcher: %d -> %d bytes on a %d-byte device", before, after, device)
}

// volume is the node's volume named name, in the spec or not.
func (n *coNode) volume(name string) peerVolume {
	for _, v := range n.all {
		if v.name == name {
			return v
		}
	}
	panic("no volume " + name)
}

// runCoStep runs one step in order and measures it.
func runCoStep(t *testing.T, n *coNode, st coStep, order string) coRow {
	t.Helper()
	if st.change != nil {
		st.change(t, n)
	}
	row := coRow{step: st.name}
	markers := n.writeMarkers(t, st.name+"/"+order)
	before := mountIDs(t)
	syscalls0 := n.hpSyscalls
	kvErr := n.both(t, st, order)
	row.churn = mountChurn(before, mountIDs(t))
	row.hpSyscalls = n.hpSyscalls - syscalls0
	if row.hpSyscalls > 0 {
		t.Logf("%s, %s: hpmount's changing syscalls:\n%s", st.name, order, n.traced[len(n.traced)-1])
	}
	if row.hpSyscalls > perTarget*st.targets {
		t.Errorf("%s, %s: hpmount made %d changing syscalls for %d targets, want at most %d", st.name, order, row.hpSyscalls, st.targets, perTarget*st.targets)
	}
	if st.check != nil {
		st.check(t, n)
	}
	// After a race, the next passes of the two mounters come at their own
	// times (a VMI update for virt-handler, a resync or mount event for
	// hpmount), not again within the same 100 ms: racing them once more
	// tests a second race, not the repair. KubeVirt goes first, so that
	// hpmount's pass is the one to clean up after it.
	next := order
	if interleaved(order) {
		next = kubevirtFirst
	}
	var findings []string
	counts, bad := n.checkSpec(t)
	row.mountsPerTarget, row.outcome = counts, "spec"
	row.dataIntact = n.readMarkers(t, markers)
	if row.churn != st.mounts {
		findings = append(findings, fmt.Sprintf("%d mounts came or went, want %d", row.churn, st.mounts))
	}
	if len(bad) > 0 || row.churn != st.mounts {
		findings = append(findings, bad...)
		if !interleaved(order) {
			t.Errorf("%s, %s: %s", st.name, order, strings.Join(findings, "; "))
		}
		// One inside the other may find the target empty and both bind:
		// hpmount's next pass must repair it.
		row.outcome = "repaired by the next pass"
		syscalls0 := n.hpSyscalls
		kvErr := n.both(t, coStep{name: st.name + " repair", kubevirt: st.kubevirt}, next)
		if kvErr != nil {
			t.Errorf("%s, %s: KubeVirt's repair pass: %v", st.name, order, kvErr)
		}
		findings = append(findings, fmt.Sprintf("hpmount's next pass: %d changing syscalls", n.hpSyscalls-syscalls0))
		counts, bad := n.checkSpec(t)
		if len(bad) > 0 && n.stackedOnShared() {
			// hpmount's bind landed on virt-handler's and stayed: the
			// race mount.ErrLandedOnAnother closes is back.
			bad = append(bad, "hpmount's bind landed on virt-handler's and was not undone (mount.ErrLandedOnAnother)")
		}
		row.mountsPerTarget += " -> " + counts
		if len(bad) > 0 {
			t.Errorf("%s, %s: after the repair pass: %s", st.name, order, strings.Join(bad, "; "))
			row.outcome = "not repaired"
		}
		if !n.readMarkers(t, markers) {
			row.dataIntact = false
		}
	}
	// A second sync of both must find nothing to do.
	before = mountIDs(t)
	syscalls0 = n.hpSyscalls
	kvErr2 := n.both(t, coStep{name: st.name + " again", kubevirt: st.kubevirt}, next)
	if c := mountChurn(before, mountIDs(t)); c != 0 {
		t.Errorf("%s, %s: the second sync changed %d mounts", st.name, order, c)
	}
	if c := n.hpSyscalls - syscalls0; c != 0 {
		t.Errorf("%s, %s: hpmount's second sync made %d changing syscalls:\n%s", st.name, order, c, n.traced[len(n.traced)-1])
	}
	for _, err := range []error{kvErr, kvErr2} {
		if err != nil {
			row.kvErrors++
			findings = append(findings, "KubeVirt: "+err.Error())
		}
	}
	logged := kvErrorLines(n.kvLog.take())
	row.kvErrors += len(logged)
	for _, l := range logged {
		findings = append(findings, "KubeVirt log: "+l)
	}
	row.hpErrors = len(n.hpErrs)
	raced := 0
	for _, e := range n.hpErrs {
		findings = append(findings, "hpmount: "+e)
		// Both at once: virt-handler's bind can arrive between
		// hpmount's look and its bind. hpmount judges it at once, and
		// leaves it to its next pass (checked above to end at the
		// spec) only when the same call loses that race twice.
		if interleaved(order) && (strings.Contains(e, mount.ErrTargetChanged.Error()) || strings.Contains(e, mount.ErrLandedOnAnother.Error())) {
			raced++
		}
	}
	n.hpErrs = nil
	row.findings = strings.Join(findings, "; ")
	// No KubeVirt error is excused: the one hpmount used to cause (its
	// Unmount meeting a recorded target hpmount had removed first) is
	// gone since hpmount leaves recorded targets to virt-handler.
	if row.hpErrors-raced > 0 || row.kvErrors > 0 {
		t.Errorf("%s, %s: errors: %s", st.name, order, row.findings)
	}
	t.Logf("%s, %s: %s; mounts per target %s; data intact %v; %d node mounts changed; hpmount %d changing syscalls; %s",
		st.name, order, row.outcome, row.mountsPerTarget, row.dataIntact, row.churn, row.hpSyscalls, row.findings)
	return row
}

// virtChrootMounts matches virt-chroot's mount and umount calls: the
// acts of virt-handler's check-then-act on a file or directory target.
const virtChrootMounts = " (mount -o|umount) "

// both runs KubeVirt's and hpmount's parts of st in order, and returns
// KubeVirt's error.
func (n *coNode) both(t *testing.T, st coStep, order string) error {
	t.Helper()
	kv := st.kubevirt
	if kv == nil {
		kv = (*coNode).kubeVirtSync
	}
	ops := st.hpmount
	if ops == nil {
		ops = []string{"sync"}
	}
	hp := func() {
		for _, op := range ops {
			n.hpmountSync(t, op)
		}
	}
	switch order {
	case kubevirtFirst:
		err := kv(n)
		hp()
		return err
	case hpmountFirst:
		hp()
		return kv(n)
	case hpmountInside:
		paused, err := n.kubeVirtPaused(t, virtChrootMounts, n.seamSkip, func() error { return kv(n) }, hp)
		if !paused {
			hp() // virt-handler mounted and unmounted nothing
		}
		return err
	case kubevirtInside:
		var err error
		n.hpmountPaused(t, ops[0], func() { err = kv(n) })
		for _, op := range ops[1:] {
			n.hpmountSync(t, op)
		}
		return err
	}
	// Both at once: KubeVirt's in-process call would otherwise finish
	// before hpmount's process has started, so it starts a seeded 0-100
	// ms later, inside hpmount's pass.
	delay := time.Duration(n.rng.Intn(100)) * time.Millisecond
	n.lastDelay = delay
	done := make(chan error, 1)
	go func() {
		time.Sleep(delay)
		done <- kv(n)
	}()
	hp()
	return <-done
}

// writeMarkers writes a marker through the launcher into each spec volume
// (where it is published, for one the launcher has not got yet) and
// returns them by volume.
func (n *coNode) writeMarkers(t *testing.T, text string) map[string]string {
	t.Helper()
	out := map[string]string{}
	if n.deleted {
		return out
	}
	for _, v := range n.vols {
		m := fmt.Sprintf("%-64s", "hpmount-peer "+text+" "+v.name)
		path := seenPath(n.launcherPod, v)
		if _, err := os.Lstat(path); err != nil {
			// Not in the launcher yet: written where it is published.
			path = n.sourcePath(v)
		}
		if v.mode == kubevirt.Directory {
			path = filepath.Join(path, "marker")
		}
		f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE, 0o600)
		must(t, err)
		_, err = f.WriteAt([]byte(m), 0)
		must(t, err)
		must(t, f.Sync())
		must(t, f.Close())
		out[v.name] = m
	}
	return out
}

// sourcePath is where v is published to the current attachment pod.
func (n *coNode) sourcePath(v peerVolume) string {
	switch v.mode {
	case kubevirt.Block:
		return n.loops[v.name].Device
	case kubevirt.Filesystem:
		return filepath.Join(n.mountDirIn(n.attach, v), "disk.img")
	}
	return n.mountDirIn(n.attach, v)
}

// readMarkers reads each marker back through every active launcher.
func (n *coNode) readMarkers(t *testing.T, markers map[string]string) bool {
	t.Helper()
	ok := true
	if n.deleted {
		return ok
	}
	for _, l := range n.activeLaunchers() {
		for _, v := range n.vols {
			path := seenPath(n.launchers[l], v)
			if v.mode == kubevirt.Directory {
				path = filepath.Join(path, "marker")
			}
			got := make([]byte, len(markers[v.name]))
			f, err := os.Open(path)
			if err == nil {
				_, err = f.ReadAt(got, 0)
				f.Close()
			}
			if err != nil || string(got) != markers[v.name] {
				t.Errorf("%s through launcher %s: %q, %v; want the marker %q", v.name, l, got, err, markers[v.name])
				ok = false
			}
		}
	}
	return ok
}

// checkSpec checks that the node holds the spec: every spec volume in
// every active launcher with exactly one mount (file and directory
// targets) or its node and cgroup rule (block), seen by the launcher;
// nothing of the others. It returns the mounts per target and what is
// wrong.
func (n *coNode) checkSpec(t *testing.T) (string, []string) {
	t.Helper()
	var counts, bad []string
	want := map[types.UID]map[string]bool{}
	for _, l := range n.activeLaunchers() {
		want[l] = map[string]bool{}
		if n.deleted {
			continue
		}
		for _, v := range n.vols {
			want[l][v.name] = true
		}
	}
	for _, l := range n.gone {
		if want[l] == nil {
			want[l] = map[string]bool{}
		}
	}
	for l, names := range want {
		cg := filepath.Join(n.cgroupRoot, "kubepods", "pod"+string(l), n.computeID(l))
		for _, v := range n.all {
			path := targetPath(l, v)
			var st unix.Stat_t
			present := unix.Lstat(path, &st) == nil
			mounts := countMounts(t, path)
			rule := "none"
			if v.mode == kubevirt.Block {
				rule = deviceRule(t, cg, n.loops[v.name])
			}
			if !names[v.name] {
				if !present && mounts == 0 && rule != "none" && n.handlersRule(t, l, v) {
					// KubeVirt's own: see handlersRule.
					counts = append(counts, v.name+":virt-handler's rule")
					continue
				}
				if present || mounts != 0 || rule != "none" {
					bad = append(bad, fmt.Sprintf("%s in launcher %s: present %v, %d mounts, rule %q; want nothing", v.name, l, present, mounts, rule))
				}
				continue
			}
			if v.mode == kubevirt.Block {
				if !present || st.Rdev != n.loops[v.name].Dev(t) || rule == "none" {
					bad = append(bad, fmt.Sprintf("%s in launcher %s: present %v, rdev %d, rule %q", v.name, l, present, st.Rdev, rule))
				}
				counts = append(counts, v.name+":node")
				continue
			}
			counts = append(counts, fmt.Sprintf("%s:%d", v.name, mounts))
			if mounts != 1 {
				bad = append(bad, fmt.Sprintf("%s in launcher %s: %d mounts on the target, want 1", v.name, l, mounts))
			}
		}
	}
	return strings.Join(counts, " "), bad
}

// countMounts is how many mounts the node's table has on path.
func countMounts(t *testing.T, path string) int {
	t.Helper()
	c := 0
	for _, p := range mountIDs(t) {
		if p == path {
			c++
		}
	}
	return c
}

// stackedOnShared reports the race of both at once that hpmount closes
// (docs/coexistence.md): hpmount's bind
// landing on top of virt-handler's in the moment between hpmount's last
// look at the target and its move_mount. virt-handler's bind is in the CSI
// publish mount's peer group, so a bind left there propagates onto
// disk.img inside the publish, and hpmount then refuses that disk.img (it
// crosses a mount point; for a directory volume open_tree fails with
// EINVAL). hpmount undoes such a bind right after move_mount, so this
// must never be seen.
func (n *coNode) stackedOnShared() bool {
	for _, e := range n.hpErrs {
		if strings.Contains(e, "crosses a mount point") || strings.Contains(e, "open_tree: invalid argument") {
			return true
		}
	}
	return false
}

// deviceRule is the compute container's rule for loop's device: on v1
// its devices.list line, on v2 what a process of the cgroup may open of
// the device ("dev:rw"); "none" when neither allows it.
func deviceRule(t *testing.T, cg string, loop *testutil.Loop) string {
	t.Helper()
	if !inCgroupV2Node {
		return cgroupLine(t, cg, loop.Dev(t))
	}
	got := probeAccess(t, cg, loop.Dev(t), [2]string{"dev", loop.Device})
	if strings.HasPrefix(got, "dev:--") {
		return "none"
	}
	access, _, _ := strings.Cut(got, " ")
	return access
}

// handlersRule reports whether, on cgroup v2, a block volume gone from
// launcher l is still allowed by virt-handler's device program and not by
// hpmount's rule. virt-handler's Mount allows a block node it finds in
// place (one hpmount made) without recording it, so its Unmount never
// removes that rule; its program keeps it until its next rebuild (the
// next block volume it mounts or unmounts for the VMI). hpmount's detach
// removes its own rule, and leaves another writer's program as it is.
// On v1 hpmount's devices.deny removes the device whoever allowed it.
func (n *coNode) handlersRule(t *testing.T, l types.UID, v peerVolume) bool {
	t.Helper()
	if !inCgroupV2Node {
		return false
	}
	dev := n.loops[v.name].Dev(t)
	req := map[string]any{"op": "allowed", "cgroupRoot": n.cgroupRoot, "cgroupMode": "v2", "kubeletRoot": kubeletRoot,
		"rules": []map[string]any{{"podUID": string(l), "containerID": "containerd://" + n.computeID(l),
			"Major": unix.Major(dev), "Minor": unix.Minor(dev)}}}
	in, err := json.Marshal(req)
	must(t, err)
	cmd := exec.Command(n.bin)
	cmd.Stdin = bytes.NewReader(in)
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("hpmountside allowed: %v", err)
	}
	var ours []bool
	must(t, json.Unmarshal(out, &ours))
	return len(ours) == 1 && !ours[0]
}
