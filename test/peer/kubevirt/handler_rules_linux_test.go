// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package peer

import (
	"bufio"
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/kubevirt"
)

// ruleWindowFor is how long TestVirtHandlerRuleWindowV2 lets virt-handler
// sync; HPMOUNT_PEER_RULE_WINDOW (a Go duration) sets another, such as
// the 60s of issue 38's measurement.
func ruleWindowFor(t *testing.T) time.Duration {
	d := 10 * time.Second
	if s := os.Getenv("HPMOUNT_PEER_RULE_WINDOW"); s != "" {
		var err error
		d, err = time.ParseDuration(s)
		must(t, err)
	}
	return d
}

// TestVirtHandlerRuleWindowV2 measures, on a cgroup v2 node, the case
// hpmount cannot make hold by itself: a VMI whose second volume
// virt-handler cannot mount (a claim without disk.img). virt-handler
// keeps volumeStatus sorted by name and its Mount walks it in that order,
// hence the names. virt-handler's
// own VM controller syncs it once a second, as its status refresh
// re-queues it; each sync's Mount allows a-blk, which rebuilds the
// launcher's device program from virt-handler's own list, and stops at
// b-nodisk before c-blk, whose rule only hpmount gave. Its IsMounted counts
// hpmount's node of c-blk, so virt-launcher attaches c-blk. hpmount's
// rule watch (hpmountside op watch, the agent's watch and verify) allows
// c-blk again. Meanwhile a second QEMU in the launcher's cgroup, as 107,
// opens both block disks (blockdev-add, then blockdev-del) every 2 ms.
//
// It holds that a-blk, in virt-handler's list, is never refused; that
// virt-handler's only complaints name b-nodisk (KubeVirt's own error); that
// hpmount restored c-blk's rule after the rewrites; and that c-blk opens
// again at the end. It logs each refusal window of c-blk: the time QEMU
// cannot open a volume hpmount reports mounted.
func TestVirtHandlerRuleWindowV2(t *testing.T) {
	testutil.RequiresRoot(t)
	if !inCgroupV2Node {
		runInCgroupV2Node(t)
		return
	}
	vols := []peerVolume{
		{name: "a-blk", mode: kubevirt.Block},
		{name: "b-nodisk", mode: kubevirt.Filesystem, fstype: "ext4", noDiskImg: true},
		{name: "c-blk", mode: kubevirt.Block},
	}
	n := newCoNode(t, "rw2", vols)
	h := newKVHandler(t, n)
	n.handler = h
	h.start(t)
	watch := n.hpmountWatch(t)
	probes := startProbeLoop(t, n.computeCgroup, n.launcherPod, []string{"a-blk", "c-blk"})
	syncs, complaints := 0, 0
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for end := time.Now().Add(ruleWindowFor(t)); time.Now().Before(end); <-tick.C {
		syncs++
		if err := h.sync(t); err != nil {
			complaints++
			for _, line := range strings.Split(err.Error(), "; ") {
				if !strings.Contains(line, "b-nodisk") {
					t.Errorf("sync %d: virt-handler's complaint is not about b-nodisk: %s", syncs, line)
				}
			}
		}
	}
	restores := watch.stop(t)
	opens := probes.stop(t)
	a, b := opens["a-blk"], opens["c-blk"]
	if a.Refused > 0 {
		t.Errorf("QEMU's opens of a-blk, in virt-handler's own list: %d of %d refused (%q)", a.Refused, a.Opens, a.Errors)
	}
	created := 0
	for _, r := range restores {
		if r.Error != "" {
			t.Errorf("hpmount's verify of %s: %s", r.Name, r.Error)
		}
		if r.Name == "c-blk" && r.Outcome == "created" {
			created++
		}
	}
	if created == 0 {
		t.Errorf("hpmount restored c-blk's rule %d times in %d of virt-handler's syncs, want at least once", created, syncs)
	}
	if err := h.launcher.qemu.probe("c-blk", launcherView+"/c-blk", true); err != nil {
		t.Errorf("after the loop QEMU's open of c-blk: %v; want it allowed", err)
	}
	l := h.launcher
	t.Logf("KubeVirt %s, %d syncs of virt-handler (%d with complaints, all about b-nodisk), %d by virt-launcher",
		kubeVirtVersion, syncs, complaints, l.syncs)
	t.Logf("the domain holds %q; virt-launcher's opens of its disks in its syncs: %d refused: %q", l.attached(), len(l.refused), l.refused)
	t.Logf("hpmount restored c-blk's rule %d times", created)
	t.Logf("QEMU's blockdev-add every %s: a-blk %d refused of %d; c-blk %d refused of %d (%q), in %d windows: %s",
		probeInterval, a.Refused, a.Opens, b.Refused, b.Opens, b.Errors, len(b.Windows), windowSummary(b.Windows))
}

// windowSummary is the median and the largest of windows.
func windowSummary(windows []time.Duration) string {
	if len(windows) == 0 {
		return "none"
	}
	w := slices.Clone(windows)
	slices.Sort(w)
	return "median " + w[len(w)/2].Round(time.Millisecond).String() + ", max " + w[len(w)-1].Round(time.Millisecond).String()
}

// hpmountRun is a running hpmountside op watch.
type hpmountRun struct {
	cmd    *exec.Cmd
	stdout bytes.Buffer
}

// hpmountWatch attaches the node's volumes with hpmountside and keeps it
// watching the launcher's device rules, as the agent does, until stop.
func (n *coNode) hpmountWatch(t *testing.T) *hpmountRun {
	t.Helper()
	req := map[string]any{"op": "watch", "kubeletRoot": kubeletRoot, "cgroupRoot": n.cgroupRoot,
		"launcherDir": launcherView, "volumes": n.desired()}
	if inCgroupV2Node {
		req["cgroupMode"] = "v2"
	}
	in, err := json.Marshal(req)
	must(t, err)
	r := &hpmountRun{cmd: exec.Command(n.bin)}
	r.cmd.Stdin, r.cmd.Stdout = bytes.NewReader(in), &r.stdout
	stderr, err := r.cmd.StderrPipe()
	must(t, err)
	must(t, r.cmd.Start())
	t.Cleanup(func() { _ = r.cmd.Process.Kill(); _ = r.cmd.Wait() })
	line, err := bufio.NewReader(stderr).ReadString('\n')
	if err != nil || line != "watching\n" {
		t.Fatalf("hpmountside watch: %q %v", line, err)
	}
	go func() { _, _ = bufio.NewReader(stderr).WriteTo(os.Stderr) }()
	return r
}

// stop ends the watch and returns its verifies.
func (r *hpmountRun) stop(t *testing.T) []struct{ Name, Outcome, Error string } {
	t.Helper()
	must(t, r.cmd.Process.Signal(syscall.SIGTERM))
	must(t, r.cmd.Wait())
	var out []struct{ Name, Outcome, Error string }
	must(t, json.Unmarshal(r.stdout.Bytes(), &out))
	return out
}
