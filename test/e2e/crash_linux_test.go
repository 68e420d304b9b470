// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/hpmount/hpmount/engine"
	"github.com/hpmount/hpmount/mount"
	"github.com/hpmount/hpmount/mountinfo"
	"github.com/hpmount/hpmount/test/harness"
	"github.com/hpmount/hpmount/test/simnode"
)

// stormVol is one volume of the kill storm with what it must still hold.
type stormVol struct {
	v   *vm
	vol simnode.Volume
	// pod is the attachment pod that publishes it; churn volumes are put
	// back into the spec with it.
	pod   types.UID
	churn bool
	sum   string
	// fsBefore is the filesystem size before the storm.
	fsBefore int64
}

// Storm sizes: at least 100 add/remove cycles, the growth steps of the xfs
// volume spread over them.
const (
	stormCycles    = 100
	stormGrowFirst = 320 << 20
	stormGrowStep  = 64 << 20
	stormGrowSteps = 3
)

// TestKillStorm SIGKILLs the agent at random moments while volumes are
// hotplugged and unplugged over and over and an xfs volume grows. After the
// last restart the node is exactly what the specs say: every desired target
// mounted once from its own source, every block node on its device, nothing
// else in any hotplug-disks, no growth mount left, every disk.img's data
// intact and the grown filesystem grown. HPMOUNT_STORM_SEED replays a run.
func TestKillStorm(t *testing.T) {
	e := newEnv(t, "--report-volume-status", "--expand-disk-images")
	seed := stormSeed(t)
	vols := setUpStorm(t, e)

	rng := rand.New(rand.NewPCG(seed, 1))
	storm := &harness.KillStorm{
		Options: harness.AgentOptions{Binary: e.agent.Cmd.Path, Kubeconfig: e.kubeconfig, Node: e.node, Args: e.agentArgs},
		MinRun:  30 * time.Millisecond, MaxRun: time.Second,
		Rand: rand.New(rand.NewPCG(seed, 2)),
	}
	agents := []*harness.Agent{e.agent}
	storm.Started = func(a *harness.Agent) {
		agents = append(agents, a) // read only after the storm ended
		// Killed at cleanup; a Kill of an agent that is gone returns at once.
		e.root.Cleanup(a.Kill)
	}
	ctx, stop := context.WithCancel(e.ctx)
	type result struct {
		last  *harness.Agent
		stats harness.StormStats
		err   error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		last, stats, err := storm.Run(ctx, e.agent)
		done <- result{last, stats, err}
	}()
	cycles, toggles := churn(t, e, rng, vols)
	stop()
	r := <-done
	stormTook := time.Since(start)
	if r.err != nil {
		t.Fatal(r.err)
	}
	e.agent = r.last
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("log of the last agent:\n%s", r.last.Log())
			logStormState(t, e, vols)
		}
	})
	t.Logf("storm: %d add/remove cycles (%d spec changes), %d growth steps, %d kills (%d past readiness), %d exits of its own, in %s",
		cycles, toggles, stormGrowSteps, r.stats.Kills, r.stats.KilledReady, r.stats.Exited, stormTook.Round(time.Millisecond))
	if r.stats.Exited > 0 {
		t.Errorf("%d agents exited without being killed", r.stats.Exited)
	}
	if r.stats.Kills < 20 {
		t.Fatalf("only %d kills: the storm did not storm", r.stats.Kills)
	}

	grows, sweeps := growthWork(agents)
	t.Logf("agents grew b-grow %d times; %d agents swept a growth mount left behind", grows, sweeps)

	e.eventually("last agent ready", 60*time.Second, e.agent.Ready)
	e.eventually("node matches the specs exactly", 60*time.Second, func() error { return converged(e, vols) })
	t.Logf("converged %s after the last restart", time.Since(e.agent.Started).Round(time.Millisecond))
	ids := mountIDs(t, vols)
	time.Sleep(2 * e2eResync)
	if err := converged(e, vols); err != nil {
		t.Fatalf("two resyncs later: %v", err)
	}
	if again := mountIDs(t, vols); !maps.Equal(ids, again) {
		t.Fatalf("mounts changed after convergence: %v, were %v", again, ids)
	}
	assertStormData(t, e, vols)
}

// growthWork counts, in the storm's agents' logs, the growths of b-grow
// (its filesystem or its disk.img) and the startups that swept a growth
// mount left behind. Growth is one resize ioctl on the launcher's bind and
// mounts nothing; the sweep is kept for older agents, so it should find
// nothing here.
func growthWork(agents []*harness.Agent) (grows, sweeps int) {
	for _, a := range agents {
		for _, line := range strings.Split(a.Log(), "\n") {
			switch {
			case strings.Contains(line, `"volume":"b-grow","op":"grow","result":"grown"`):
				grows++
			case strings.Contains(line, "swept growth mounts an earlier run left behind") && !strings.Contains(line, `"count":0`):
				sweeps++
			}
		}
	}
	return grows, sweeps
}

// mountIDs are the ids of the desired filesystem targets' mounts.
func mountIDs(t *testing.T, vols []*stormVol) map[string]int {
	ids := map[string]int{}
	for _, v := range stormVMs(vols) {
		for _, vol := range v.Vols {
			if !vol.Block {
				id, err := v.MountID(vol)
				if err != nil {
					t.Fatal(err)
				}
				ids[v.Name+"/"+vol.Name] = id
			}
		}
	}
	return ids
}

// converged is nil once the node is exactly what the specs want and
// b-grow's filesystem and disk.img have their final size.
func converged(e *env, vols []*stormVol) error {
	if err := exactly(e, vols); err != nil {
		return err
	}
	for _, sv := range vols {
		if sv.vol.Name == "b-grow" {
			return grownTo(sv, stormGrowFirst+stormGrowSteps*stormGrowStep)
		}
	}
	return nil
}

// grownTo is nil once the filesystem under the target grew by as much as
// its device (statfs leaves xfs's log out, so compare growth, not size)
// and disk.img has KubeVirt's usable size for the new capacity.
func grownTo(sv *stormVol, capacity int64) error {
	v, vol := sv.v, sv.v.Vol(sv.vol.Name)
	var sfs unix.Statfs_t
	var st unix.Stat_t
	if err := unix.Statfs(v.Target(vol), &sfs); err != nil {
		return err
	}
	if err := unix.Stat(v.Target(vol), &st); err != nil {
		return err
	}
	if size := int64(sfs.Blocks) * sfs.Bsize; size-sv.fsBefore < capacity-stormGrowFirst {
		return fmt.Errorf("%s: filesystem of %d bytes, %d before a device growth of %d: not grown yet", vol.Name, size, sv.fsBefore, capacity-stormGrowFirst)
	}
	want, err := mount.DiskImageSize(capacity, 0.055, int64(sfs.Bavail)*sfs.Bsize, st.Blocks*512)
	if err != nil {
		return err
	}
	if st.Size != want {
		return fmt.Errorf("%s: disk.img of %d bytes, want %d", vol.Name, st.Size, want)
	}
	return nil
}

// stormSeed is $HPMOUNT_STORM_SEED or a fresh one, logged to replay it.
func stormSeed(t *testing.T) uint64 {
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("HPMOUNT_STORM_SEED"); s != "" {
		var err error
		if seed, err = strconv.ParseUint(s, 10, 64); err != nil {
			t.Fatalf("HPMOUNT_STORM_SEED %q: %v", s, err)
		}
	}
	t.Logf("storm seed %d (HPMOUNT_STORM_SEED=%d replays it)", seed, seed)
	return seed
}

// setUpStorm hotplugs three VMIs' volumes with the agent running
// undisturbed, writes known data into each and records its checksum. The
// xfs volume to grow ends up no longer published by any attachment pod, so
// its growth is the agent's, not the kubelet's.
func setUpStorm(t *testing.T, e *env) []*stormVol {
	a, b, c := e.newVM("storm-a", "vm-a"), e.newVM("storm-b", "vm-b"), e.newVM("storm-c", "vm-c")
	type spec struct {
		v            *vm
		name, fstype string
		size         int64
		churn        bool
	}
	var vols []*stormVol
	add := func(specs ...spec) []simnode.Volume {
		var out []simnode.Volume
		for _, s := range specs {
			vol := s.v.addVolume(s.name, s.fstype, s.size)
			vols = append(vols, &stormVol{v: s.v, vol: vol, churn: s.churn})
			out = append(out, vol)
		}
		return out
	}
	attach := func(v *vm, vs []simnode.Volume) *corev1.Pod {
		pod := v.newAttachmentPod(vs...)
		for _, sv := range vols {
			if sv.v == v && slices.ContainsFunc(vs, func(x simnode.Volume) bool { return x.Name == sv.vol.Name }) {
				sv.pod = pod.UID
			}
		}
		v.apply()
		return pod
	}
	attach(a, add(spec{a, "a-ext4", "ext4", 64 << 20, false}, spec{a, "a-blk", "", 32 << 20, true}, spec{a, "a-churn", "ext4", 64 << 20, true}))
	growVols := add(spec{b, "b-grow", "xfs", stormGrowFirst, false}, spec{b, "b-blk", "", 32 << 20, false})
	hp1 := attach(b, growVols)
	attach(c, add(spec{c, "c-xfs", "xfs", 320 << 20, true}, spec{c, "c-blk", "", 32 << 20, true}))
	waitAll(e, vols)

	// KubeVirt replaces B's attachment pod for a new volume: b-grow is
	// published by no pod from then on.
	churnVol := b.addVolume("b-churn", "xfs", 320<<20)
	hp2 := b.replaceAttachmentPod(hp1, growVols, growVols[1], churnVol)
	vols = append(vols, &stormVol{v: b, vol: churnVol, churn: true, pod: hp2.UID})
	for _, sv := range vols {
		if sv.v == b {
			sv.pod = hp2.UID
		}
	}
	b.apply()
	waitAll(e, vols)
	for _, sv := range vols {
		sv.sum = sv.v.writeRandom(t, sv.vol)
		if !sv.vol.Block {
			sv.fsBefore = sv.v.launcherStatfs(t, sv.vol)
		}
	}
	return vols
}

func waitAll(e *env, vols []*stormVol) {
	e.t.Helper()
	for _, sv := range vols {
		if sv.vol.Block {
			sv.v.waitNode(sv.vol)
		} else {
			sv.v.waitMounted(sv.vol)
		}
	}
}

// churn takes random churn volumes out of their VMI's spec and puts them
// back until stormCycles volumes went in and out again, growing b-grow's
// device and claim in steps on the way. It returns the cycles and the spec
// changes made.
func churn(t *testing.T, e *env, rng *rand.Rand, vols []*stormVol) (cycles, toggles int) {
	var churners []*stormVol
	for _, sv := range vols {
		if sv.churn {
			churners = append(churners, sv)
		}
	}
	in := map[*stormVol]bool{}
	for _, sv := range churners {
		in[sv] = true
	}
	grown := 0
	for cycles < stormCycles || grown < stormGrowSteps {
		if grown < stormGrowSteps && cycles >= (grown+1)*stormCycles/(stormGrowSteps+1) {
			grown++
			growStep(t, e, vols, stormGrowFirst+int64(grown)*stormGrowStep)
		}
		sv := churners[rng.IntN(len(churners))]
		if in[sv] {
			sv.v.RemoveVolume(sv.vol.Name)
			cycles++ // it went in (at setup or earlier) and now out
		} else {
			sv.v.Vols = append(sv.v.Vols, sv.vol)
			sv.v.Attach[sv.vol.Name] = sv.pod
		}
		in[sv] = !in[sv]
		toggles++
		if err := applyRetrying(e.ctx, sv.v); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Duration(40+rng.IntN(160)) * time.Millisecond)
	}
	return cycles, toggles
}

// growStep grows b-grow's device and raises its claim's request, as an
// expansion of a volume that no pod publishes looks to the node.
func growStep(t *testing.T, e *env, vols []*stormVol, size int64) {
	for _, sv := range vols {
		if sv.vol.Name != "b-grow" {
			continue
		}
		if err := sv.v.Disks[sv.vol.Name].Grow(size); err != nil {
			t.Fatal(err)
		}
		sv.v.SetRequest(sv.vol.Name, size)
		if err := applyRetrying(e.ctx, sv.v); err != nil {
			t.Fatal(err)
		}
	}
}

// applyRetrying writes the VMI, again on a conflict with the agent's own
// volumeStatus patches.
func applyRetrying(ctx context.Context, v *vm) error {
	return retry.RetryOnConflict(retry.DefaultRetry, func() error { return v.Apply(ctx) })
}

// exactly is nil once the node is exactly what the specs want, or says the
// first difference.
func exactly(e *env, vols []*stormVol) error {
	table, err := harness.HostTable()
	if err != nil {
		return err
	}
	allowed := map[string]bool{} // mount points the agent may have made
	for _, v := range stormVMs(vols) {
		want := map[string]bool{}
		for _, vol := range v.Vols {
			want[filepath.Base(v.Target(vol))] = true
			if err := desiredThere(table, v, vol); err != nil {
				return err
			}
			if !vol.Block {
				allowed[v.Target(vol)] = true
			}
		}
		dir := e.node.HotplugDisksDir(string(v.Launcher.UID))
		entries, err := os.ReadDir(dir)
		if err != nil {
			return err
		}
		for _, ent := range entries {
			if !want[ent.Name()] {
				return fmt.Errorf("%s/%s: leftover %s", v.Name, ent.Name(), ent.Type())
			}
		}
		if len(entries) != len(want) {
			return fmt.Errorf("%s: %d entries in hotplug-disks, want %d", v.Name, len(entries), len(want))
		}
	}
	return strayMounts(e, table, vols, allowed)
}

func stormVMs(vols []*stormVol) []*vm {
	var vms []*vm
	for _, sv := range vols {
		if !slices.Contains(vms, sv.v) {
			vms = append(vms, sv.v)
		}
	}
	return vms
}

// desiredThere checks one desired volume: a single bind of its own disk.img,
// or a node of its own device.
func desiredThere(table *mountinfo.Table, v *vm, vol simnode.Volume) error {
	major, minor, err := v.Disks[vol.Name].Rdev()
	if err != nil {
		return err
	}
	if vol.Block {
		var st unix.Stat_t
		if err := unix.Lstat(v.Target(vol), &st); err != nil {
			return fmt.Errorf("%s/%s: %w", v.Name, vol.Name, err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFBLK || unix.Major(st.Rdev) != major || unix.Minor(st.Rdev) != minor {
			return fmt.Errorf("%s/%s: mode %o device %d:%d, want a block node of %d:%d", v.Name, vol.Name,
				st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev), major, minor)
		}
		return nil
	}
	top, n := table.Top(v.Target(vol))
	want := fmt.Sprintf("%d:%d", major, minor)
	switch {
	case top == nil:
		return fmt.Errorf("%s/%s not mounted", v.Name, vol.Name)
	case n != 1 || top.Root != "/disk.img" || top.Dev() != want:
		return fmt.Errorf("%s/%s: %d mounts, top %s[%s], want one of %s[/disk.img]", v.Name, vol.Name, n, top.Dev(), top.Root, want)
	}
	return nil
}

// strayMounts finds a mount the agent left: anything below a growth
// directory, in a hotplug-disks directory but a desired target, or of a
// volume's filesystem anywhere but a desired target and the kubelet's own
// publish directories.
func strayMounts(e *env, table *mountinfo.Table, vols []*stormVol, allowed map[string]bool) error {
	private := filepath.Clean(engine.DefaultConfig().PrivateDir) + "/"
	devs := map[string]string{}
	for _, sv := range vols {
		if !sv.vol.Block {
			major, minor, err := sv.v.Disks[sv.vol.Name].Rdev()
			if err != nil {
				return err
			}
			devs[fmt.Sprintf("%d:%d", major, minor)] = sv.vol.Name
		}
	}
	publish := filepath.Join(e.node.KubeletRoot, "pods") + "/"
	for _, m := range table.Mounts() {
		mp := m.MountPoint
		switch {
		case strings.HasPrefix(mp, private):
			return fmt.Errorf("growth mount left at %s (%s)", mp, m.Dev())
		case strings.Contains(mp, "/hotplug-disks/") && !allowed[mp]:
			return fmt.Errorf("stray mount in hotplug-disks: %s (%s)", mp, m.Dev())
		case devs[m.Dev()] != "" && !allowed[mp] && !(strings.HasPrefix(mp, publish) && strings.Contains(mp, "/volumes/kubernetes.io~csi/")):
			return fmt.Errorf("%s's filesystem is mounted at %s", devs[m.Dev()], mp)
		}
	}
	return nil
}

// assertStormData checks every volume's data from its source (desired or
// not) and through the launcher (desired), and the growth of b-grow.
func assertStormData(t *testing.T, e *env, vols []*stormVol) {
	for _, sv := range vols {
		got, err := harness.SourceSHA256(sv.v.Disks[sv.vol.Name], sv.vol.Block, 2<<20, 4<<20)
		if err != nil {
			t.Fatal(err)
		}
		if got != sv.sum {
			t.Errorf("%s/%s: source data changed: %s, was %s", sv.v.Name, sv.vol.Name, got, sv.sum)
		}
		if slices.ContainsFunc(sv.v.Vols, func(x simnode.Volume) bool { return x.Name == sv.vol.Name }) {
			if got := sv.v.sumThroughLauncher(t, sv.vol); got != sv.sum {
				t.Errorf("%s/%s: the launcher reads %s, was %s", sv.v.Name, sv.vol.Name, got, sv.sum)
			}
		}
		if sv.vol.Name == "b-grow" {
			size := sv.v.launcherStatfs(t, sv.vol)
			t.Logf("the launcher sees b-grow's filesystem at %d bytes, %d before the storm", size, sv.fsBefore)
			if size-sv.fsBefore < stormGrowSteps*stormGrowStep {
				t.Errorf("b-grow's filesystem did not grow by %d bytes", stormGrowSteps*stormGrowStep)
			}
		}
	}
}

// logStormState says, for a failure, what the agent reported about each
// VMI: its Events and the size gauges of its volumes.
func logStormState(t *testing.T, e *env, vols []*stormVol) {
	text, err := e.agent.Scrape()
	for _, v := range stormVMs(vols) {
		events, _ := harness.Events(e.ctx, e.kube, v.NS, v.Name)
		for _, ev := range events {
			if ev.Reason != "VolumeMounted" && ev.Reason != "VolumeUnmounted" {
				t.Logf("%s event %s %s x%d: %s", v.Name, ev.Type, ev.Reason, ev.Count, ev.Message)
			}
		}
		for _, line := range strings.Split(text, "\n") {
			if strings.Contains(line, `vmi="`+v.Name+`"`) {
				t.Logf("%s", line)
			}
		}
	}
	if err != nil {
		t.Logf("scrape: %v", err)
	}
}
