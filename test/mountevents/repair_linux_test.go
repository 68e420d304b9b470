// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mountevents

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"golang.org/x/sys/unix"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	kubefake "k8s.io/client-go/kubernetes/fake"

	"github.com/hpmount/hpmount/agent"
	"github.com/hpmount/hpmount/blockdev"
	"github.com/hpmount/hpmount/engine"
	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubelet"
	"github.com/hpmount/hpmount/kubevirt"
	kt "github.com/hpmount/hpmount/kubevirt/kubevirttest"
)

func TestMain(m *testing.M) { testutil.RunInPrivateMountNamespace(m) }

// host is the test's own mount namespace, standing for the node's.
var host = isolation.Host{Proc: "/proc", PID: os.Getpid()}

// attempts hands the test every attach the agent made, as it is reported.
type attempts struct {
	agent.NopObserver
	attach chan string
}

func (o *attempts) OpAttempt(op, result string, _ time.Duration) {
	if op == "attach" {
		o.attach <- result
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// publish makes a kubelet root where the attachment pod publishes claim
// c1's PV and the launcher has its hotplug-disks, and returns the root
// and the target of volume hp.
func publish(t *testing.T) (string, string) {
	root, err := filepath.EvalSymlinks(t.TempDir())
	must(t, err)
	src := filepath.Join(root, kubelet.VolumesDir(string(kt.AttachUID)), "kubernetes.io~csi", "pv-1", "mount")
	dir := filepath.Join(root, kubelet.HotplugDisksDir(string(kt.LauncherUID)))
	for _, d := range []string{src, dir} {
		must(t, os.MkdirAll(d, 0o755))
	}
	must(t, os.WriteFile(filepath.Join(src, "disk.img"), make([]byte, 1<<20), 0o644))
	target := filepath.Join(dir, kubelet.TargetName("hp"))
	t.Cleanup(func() {
		for unix.Unmount(target, unix.MNT_DETACH) == nil {
		}
	})
	return root, target
}

// startAgent runs the agent with the real engine until the test ends, and
// waits for its first attach: behind the watcher with a resync of an
// hour, or without it and with the resync given.
func startAgent(t *testing.T, root string, obs *attempts, watch bool, resync time.Duration) {
	eng, err := engine.New(engine.Config{Host: host, KubeletRoot: root,
		CgroupRoot: "/sys/fs/cgroup", CgroupMode: blockdev.CgroupAuto, SysRoot: "/sys", DevRoot: "/dev", UID: 107, GID: 107,
		MountEvents: watch})
	must(t, err)
	t.Cleanup(eng.Close)
	kube := kubefake.NewClientset(kt.PVC("c1", "pv-1"), kt.Launcher(), kt.AttachmentPod())
	dyn := dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{kubevirt.VMIResource: "VirtualMachineInstanceList"},
		kt.VMIObject(kt.Vol{Name: "hp", Claim: "c1", AttachUID: kt.AttachUID}))
	cfg := agent.DefaultConfig()
	cfg.NodeName, cfg.HealthAddress, cfg.MetricsAddress, cfg.Observer = kt.Node, "", "", obs
	cfg.ResyncPeriod = resync
	a, err := agent.New(cfg, kube, dyn, eng)
	must(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() { cancel(); must(t, <-done) })
	if r := waitAttach(t, obs); r != "mounted" {
		t.Fatalf("first attach: %s", r)
	}
}

// waitAttach returns the result of the agent's next attach that changed
// something. The deadline only detects a hang: without events the next
// pass would be the resync, an hour away.
func waitAttach(t *testing.T, obs *attempts) string {
	t.Helper()
	hang := time.After(time.Minute)
	for {
		select {
		case r := <-obs.attach:
			if r != "unchanged" {
				return r
			}
		case <-hang:
			t.Fatal("no repair within a minute: the event path did not wake the agent")
		}
	}
}

// mountCount is how many mounts are stacked on path, from the test's
// mount table.
func mountCount(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	must(t, err)
	n := 0
	for _, line := range slices.Collect(splitLines(b)) {
		var id, parent int
		var dev, rootDir, mp string
		if _, err := fmt.Sscanf(line, "%d %d %s %s %s", &id, &parent, &dev, &rootDir, &mp); err == nil && mp == path {
			n++
		}
	}
	return n
}

func splitLines(b []byte) func(func(string) bool) {
	return func(yield func(string) bool) {
		for len(b) > 0 {
			i := slices.Index(b, '\n')
			if i < 0 {
				i = len(b)
			}
			if !yield(string(b[:i])) {
				return
			}
			b = b[min(i+1, len(b)):]
		}
	}
}

// TestForeignChangesRepairedByEvents: with the resync an hour away, a
// target unmounted by someone else is mounted again, and a mount stacked
// on it is peeled, each on the kernel's mount event. The time from the
// foreign change to the agent's report of the repair is logged.
//
// The changes come at the pace of incidents, one every paceOfIncidents:
// after the agent's recheck a second after each attach, so that nothing
// but the event can repair the next change within the hour, and slower
// than the fight the agent bounds to a few passes a second per VMI
// (agent.MountWatcher), which a back-to-back loop would measure instead.
func TestForeignChangesRepairedByEvents(t *testing.T) {
	testutil.RequiresRoot(t)
	unmounted, stacked, results := foreignChanges(t, 10, true, time.Hour)
	t.Logf("foreign unmount to repair: %s", summary(unmounted))
	t.Logf("stacked mount to repair: %s", summary(stacked))
	// The resync path, the safety net, repairs the same changes the same
	// way, only later.
	// Its times are not compared: they depend on the phase of its ticker
	// and of the recheck a second after each attach.
	_, _, resynced := foreignChanges(t, 2, false, 300*time.Millisecond)
	if !slices.Equal(results[:len(resynced)], resynced) {
		t.Errorf("the event path repaired with %v, the resync path with %v", results, resynced)
	}
}

// foreignChanges unmounts the agent's target, then stacks a mount on it,
// rounds times, each once the agent repaired the last, and returns the
// time each repair took and the attach results that repaired them.
func foreignChanges(t *testing.T, rounds int, watch bool, resync time.Duration) (unmounted, stacked []time.Duration, results []string) {
	root, target := publish(t)
	obs := &attempts{attach: make(chan string, 16)}
	startAgent(t, root, obs, watch, resync)
	foreign := filepath.Join(root, "foreign.img")
	must(t, os.WriteFile(foreign, nil, 0o644))
	pace := time.NewTicker(paceOfIncidents)
	defer pace.Stop()
	for range rounds {
		<-pace.C
		start := time.Now()
		// Lazily, as umount -l: a plain unmount fails with EBUSY while
		// the agent's growth check (every resync) holds the file open.
		must(t, unix.Unmount(target, unix.MNT_DETACH))
		results = append(results, waitAttach(t, obs))
		unmounted = append(unmounted, time.Since(start))
		if n := mountCount(t, target); n != 1 {
			t.Fatalf("after the unmount was repaired, %d mounts on the target", n)
		}

		<-pace.C
		start = time.Now()
		must(t, unix.Mount(foreign, target, "", unix.MS_BIND, ""))
		results = append(results, waitAttach(t, obs))
		stacked = append(stacked, time.Since(start))
		if n := mountCount(t, target); n != 1 {
			t.Fatalf("after the stacked mount was repaired, %d mounts on the target", n)
		}
	}
	return unmounted, stacked, results
}

// paceOfIncidents spaces the foreign changes of the test.
const paceOfIncidents = 1500 * time.Millisecond

func summary(d []time.Duration) string {
	slices.Sort(d)
	return fmt.Sprintf("%d rounds, median %s, p90 %s, max %s", len(d),
		d[len(d)/2].Round(10*time.Microsecond), d[len(d)*9/10].Round(10*time.Microsecond), d[len(d)-1].Round(10*time.Microsecond))
}
