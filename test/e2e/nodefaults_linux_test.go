// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/test/harness"
	"github.com/hpmount/hpmount/test/simnode"
)

// Sizes of the node-level faults (#37). The issue asks for a VMI naming
// 5,000 claims; at about 400 bytes a volume (spec entry and volumeStatus,
// as virt-controller writes them) no such VMI can be stored: etcd refuses
// a request over 1.5 MiB by default (RKE2 keeps it), and the test's
// etcd said so ("request is too large"). 3,000 is the largest round
// number that fits.
const (
	floodClaims = 3000
	otherMounts = 10000
)

// TestNodeFaultsCostTheirVMIAlone (#37): one VMI's bad storage or bad
// object costs that VMI alone. A healthy VMI hotplugs a filesystem and a
// block volume, unplugs them and grows an xfs volume, first on a quiet
// node (the baseline), then beside three faulty VMIs at once:
//   - one whose volume's storage stops answering while it is attached, and
//     another of whose volumes hangs once mounted, with growth due;
//   - one whose status names 3,000 claims that do not exist (floodClaims),
//     carried by its own attachment pod;
//   - one whose launcher holds a dead entry (its xfs shut down), on a node
//     with 10,000 other mounts under the kubelet root.
//
// Each step of the healthy VMI stays within max(1 s, 3 × its baseline).
// The threads the agent holds for calls it gave up on, and the API
// requests for claims per pass, stay bounded, and the test prints both.
func TestNodeFaultsCostTheirVMIAlone(t *testing.T) {
	e := newEnv(t, "--call-timeout", hungCallTimeout.String(), "--grow-timeout", "10s", "--grow-filesystems")
	// The agent again, through a proxy that counts its claim requests.
	e.agent.Kill()
	<-e.agent.Done()
	cfg, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	e.must(err)
	proxy := e.startCountingProxy(cfg)
	e.kubeconfig = proxy.kubeconfig
	e.startAgent()

	healthy := e.newVM("tenant-healthy", "healthy")
	xfs := healthy.addVolume("xfs", "xfs", testutil.MinXFSSize)
	hp := healthy.newAttachmentPod(xfs)
	healthy.apply()
	healthy.waitMounted(xfs)
	// A second hotplug replaces the attachment pod: no pod publishes xfs
	// any more, so the agent, not the kubelet, grows it.
	keep := healthy.addVolume("keep", "ext4", 64<<20)
	healthy.replaceAttachmentPod(hp, []simnode.Volume{xfs}, keep)
	healthy.apply()
	healthy.waitMounted(keep)

	var baseline healthySteps
	e.step("baseline on a quiet node", func(t *testing.T) {
		baseline = healthy.steps(t, "a", testutil.MinXFSSize+64<<20)
		t.Logf("baseline: %s", baseline)
	})

	var flood *vm
	e.step("three faulty VMIs", func(t *testing.T) {
		e.hungVMI(t)
		flood = e.floodVMI(t)
		e.deadEntryVMI(t)
	})

	e.step("the healthy VMI beside them", func(t *testing.T) {
		before := proxy.Count()
		passesBefore := e.reconcilePasses(t)
		got := healthy.steps(t, "b", testutil.MinXFSSize+128<<20)
		t.Logf("beside the faults: %s", got)
		// The flooding VMI changes too, and each change brings a pass.
		for range 3 {
			flood.apply()
		}
		e.eventually("the flooding VMI's passes", 60*time.Second, func() error {
			if n := e.reconcilePasses(t) - passesBefore; n < 3 {
				return fmt.Errorf("%d passes", n)
			}
			return nil
		})
		for _, s := range []struct {
			what      string
			got, base time.Duration
		}{{"hotplug", got.hotplug, baseline.hotplug}, {"unplug", got.unplug, baseline.unplug}, {"grow", got.grow, baseline.grow}} {
			if limit := max(time.Second, 3*s.base); s.got > limit {
				t.Errorf("%s took %s beside the faults, %s on a quiet node (limit %s)", s.what, s.got, s.base, limit)
			}
		}
		after := proxy.Count()
		passes := e.reconcilePasses(t) - passesBefore
		requests, byKind := 0, map[string]int{}
		for kind, n := range after.Requests {
			requests += n - before.Requests[kind]
			byKind[kind] = n - before.Requests[kind]
		}
		t.Logf("claim requests by kind: %v", byKind)

		stuck := e.stuckThreads(t)
		t.Logf("claim requests during the steps: %d in %d passes; threads held by calls given up on: %d", requests, passes, stuck)
		// The missing claims are not read by name on every pass: a pass
		// costs a few reads, whatever the object claims.
		if requests > 5*passes {
			t.Errorf("%d claim requests in %d passes: the node reads what an object claims", requests, passes)
		}
		// The hung volumes hold a thread each, per kind of call (attach,
		// growth) and for their storage probes; nothing else is stuck. At
		// least the hung attach still holds one: the faults are in place.
		if stuck < 1 || stuck > 6 {
			t.Errorf("%d threads held by calls given up on, want 1 to 6", stuck)
		}
		e.must(e.agent.Ready())
	})
}

// healthySteps is how long each step of the healthy VMI took.
type healthySteps struct{ hotplug, unplug, grow time.Duration }

func (s healthySteps) String() string {
	return fmt.Sprintf("hotplug %s, unplug %s, grow %s", s.hotplug.Round(time.Millisecond),
		s.unplug.Round(time.Millisecond), s.grow.Round(time.Millisecond))
}

// steps hotplugs a filesystem and a block volume named after round,
// unplugs them, and grows the VMI's xfs volume to size, timing each.
func (v *vm) steps(t *testing.T, round string, size int64) healthySteps {
	t.Helper()
	var s healthySteps
	fs := v.addVolume("fs-"+round, "ext4", 64<<20)
	blk := v.addVolume("blk-"+round, "", 32<<20)
	start := time.Now()
	v.newAttachmentPod(fs, blk)
	v.apply()
	v.waitMounted(fs)
	v.waitNode(blk)
	s.hotplug = time.Since(start)

	start = time.Now()
	v.RemoveVolume(fs.Name)
	v.RemoveVolume(blk.Name)
	v.apply()
	v.waitGone(fs)
	v.waitGone(blk)
	s.unplug = time.Since(start)

	xfs := v.volume(t, "xfs")
	before := v.launcherStatfs(t, xfs)
	if err := v.Disks["xfs"].Grow(size); err != nil {
		t.Fatal(err)
	}
	start = time.Now()
	v.SetRequest("xfs", size)
	v.apply()
	v.e.eventually("xfs grown in the launcher", 60*time.Second, func() error {
		if after := v.launcherStatfs(t, xfs); after <= before+32<<20 {
			return fmt.Errorf("launcher sees %d bytes, was %d: not grown", after, before)
		}
		return nil
	})
	s.grow = time.Since(start)
	return s
}

// volume is the VMI's volume named name.
func (v *vm) volume(t *testing.T, name string) simnode.Volume {
	t.Helper()
	for _, vol := range v.Vols {
		if vol.Name == name {
			return vol
		}
	}
	t.Fatalf("no volume %q", name)
	return simnode.Volume{}
}

// hungVMI makes a VMI whose storage hangs: one volume mounted while its
// server answers, which then stops, with growth due; and one whose server
// stops before the attach.
func (e *env) hungVMI(t *testing.T) {
	v := e.newVM("tenant-hung", "hung")
	later := simnode.Volume{Name: "later", Claim: v.Name + "-later", PV: "pvc-" + string(v.UID)[:8] + "-later", Capacity: simnode.Mi(64)}
	early := simnode.Volume{Name: "early", Claim: v.Name + "-early", PV: "pvc-" + string(v.UID)[:8] + "-early", Capacity: simnode.Mi(64)}
	for _, vol := range []simnode.Volume{later, early} {
		e.must(e.ctrl.CreatePVC(e.ctx, v.NS, vol))
	}
	pod, err := e.ctrl.CreateAttachmentPod(e.ctx, v.Launcher, []simnode.Volume{later})
	e.must(err)
	laterFS, err := e.node.PublishHanging(string(pod.UID), later.PV)
	e.must(err)
	e.root.Cleanup(laterFS.Abort) // the faults last until the test ends
	v.Vols, v.Attach[later.Name] = append(v.Vols, later), pod.UID
	v.apply()
	v.waitMounted(later)
	laterFS.Hang()
	v.SetCapacity(later.Name, 128<<20) // growth due on storage that does not answer

	pod2, err := e.ctrl.CreateAttachmentPod(e.ctx, v.Launcher, []simnode.Volume{later, early})
	e.must(err)
	earlyFS, err := e.node.PublishHanging(string(pod2.UID), early.PV)
	e.must(err)
	e.root.Cleanup(earlyFS.Abort)
	// Served once before it hangs: a connection whose FUSE_INIT is never
	// answered blocks every request before it is sent, Abort's too.
	_, err = os.Stat(filepath.Join(e.node.CSIMountDir(string(pod2.UID), early.PV), "disk.img"))
	e.must(err)
	earlyFS.Hang()
	v.Vols, v.Attach[early.Name] = append(v.Vols, early), pod2.UID
	v.apply()
	e.waitEvent(v.NS, v.Name, "HotplugStuck", "early")
}

// floodVMI makes a VMI whose status names floodClaims claims that do not
// exist, all carried by its own attachment pod.
func (e *env) floodVMI(t *testing.T) *vm {
	v := e.newVM("tenant-flood", "flood")
	vols := make([]simnode.Volume, floodClaims)
	for i := range vols {
		n := "f" + strconv.Itoa(i)
		vols[i] = simnode.Volume{Name: n, Claim: "c" + strconv.Itoa(i), PV: "pv-flood-" + n, Capacity: simnode.Mi(1)}
	}
	pod, err := e.ctrl.CreateAttachmentPod(e.ctx, v.Launcher, vols)
	e.must(err)
	for _, vol := range vols {
		v.Attach[vol.Name] = pod.UID
	}
	v.Vols = vols
	v.apply()
	t.Logf("a VMI naming %d claims that do not exist", floodClaims)
	return v
}

// deadEntryVMI makes a VMI whose launcher holds a bind of an xfs that is
// then shut down, and mounts otherMounts more under the kubelet root.
func (e *env) deadEntryVMI(t *testing.T) {
	v := e.newVM("tenant-dead", "dead")
	vol := v.addVolume("dead", "xfs", testutil.MinXFSSize)
	pod := v.newAttachmentPod(vol)
	v.apply()
	v.waitMounted(vol)
	testutil.Run(t, "xfs_io", "-x", "-c", "shutdown", e.node.CSIMountDir(string(pod.UID), vol.PV))

	other := filepath.Join(e.node.KubeletRoot, "other-mounts")
	e.must(os.MkdirAll(other, 0o755))
	e.must(unix.Mount("other", other, "tmpfs", 0, "size=1m"))
	e.root.Cleanup(func() { _ = unix.Unmount(other, unix.MNT_DETACH) })
	// Private: the binds below propagate nowhere.
	e.must(unix.Mount("", other, "", unix.MS_PRIVATE, ""))
	src := filepath.Join(other, "src")
	e.must(os.Mkdir(src, 0o755))
	start := time.Now()
	for i := range otherMounts {
		d := filepath.Join(other, strconv.Itoa(i))
		e.must(os.Mkdir(d, 0o755))
		e.must(unix.Mount(src, d, "", unix.MS_BIND, ""))
	}
	t.Logf("%d other mounts under the kubelet root in %s", otherMounts, time.Since(start).Round(time.Millisecond))
}

// reconcilePasses is how many reconciles the agent finished so far.
func (e *env) reconcilePasses(t *testing.T) int {
	t.Helper()
	text, err := e.agent.Scrape()
	e.must(err)
	n, err := harness.Gauge(text, "hpmount_reconcile_duration_seconds_count")
	e.must(err)
	return int(n)
}

// stuckThreads is hpmount_stuck_threads now.
func (e *env) stuckThreads(t *testing.T) int {
	t.Helper()
	text, err := e.agent.Scrape()
	e.must(err)
	v, err := harness.Gauge(text, "hpmount_stuck_threads")
	e.must(err)
	return int(v)
}
