// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/diag"
	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/test/harness"
	"github.com/hpmount/hpmount/test/simnode"
)

// e2eResync is the agent's --resync-period in these tests (harness
// default).
const e2eResync = 2 * time.Second

// TestDeadSource shuts down the xfs filesystem behind one hotplugged volume
// (xfs_io shutdown: every call on it answers EIO, as when its device or
// server is gone). diag reports that volume with a verdict of its own and
// every other volume ok; within a resync the metrics count it failed and a
// Warning Event names it; its unplug completes; another VMI keeps
// attaching meanwhile; and /healthz stays 200, no call left stuck.
func TestDeadSource(t *testing.T) {
	e := newEnv(t)
	a := e.newVM("tenant-dead", "vm-a")
	dead := a.addVolume("dead", "xfs", testutil.MinXFSSize)
	keep := a.addVolume("keep", "ext4", 64<<20)
	raw := a.addVolume("raw", "", 32<<20)
	hpA := a.newAttachmentPod(dead, keep, raw)
	a.apply()
	b := e.newVM("tenant-live", "vm-b")
	b1 := b.addVolume("b1", "ext4", 64<<20)
	hpB := b.newAttachmentPod(b1)
	b.apply()
	a.waitMounted(dead)
	keepID := a.waitMounted(keep)
	a.waitNode(raw)
	b.waitMounted(b1)
	e.eventually("every volume mounted in the metrics", 30*time.Second, func() error {
		return e.volumeCount("Filesystem", "mounted", 3)
	})
	health := e.watchHealth()

	var shutdown time.Time
	e.step("the source filesystem shuts down", func(t *testing.T) {
		if out, err := runCmd("xfs_io", "-x", "-c", "shutdown", e.node.CSIMountDir(string(hpA.UID), dead.PV)); err != nil {
			t.Fatalf("xfs_io shutdown: %v\n%s", err, out)
		}
		shutdown = time.Now()
		var st unix.Stat_t
		if err := unix.Stat(a.Target(dead), &st); !errors.Is(err, unix.EIO) {
			t.Fatalf("stat of the target after the shutdown = %v, want EIO", err)
		}
	})

	e.step("metrics and a Warning Event report it within a resync", func(t *testing.T) {
		within := e2eResync + 3*time.Second // a pass that just missed it, then the next one
		e.eventually("the dead volume counted failed", within, func() error {
			return e.volumeCount("Filesystem", "failed", 1)
		})
		ev := e.waitEvent(a.NS, a.Name, "HotplugFailed", "Volume dead ")
		if ev.Type != "Warning" {
			t.Fatalf("event type %s: %s", ev.Type, ev.Message)
		}
		t.Logf("reported %s after the shutdown: %s", time.Since(shutdown).Round(time.Millisecond), ev.Message)
		// A dead filesystem is not unsafe tenant content.
		for _, ev := range e.events(a.NS, a.Name) {
			if ev.Reason == "HotplugRefused" {
				t.Fatalf("the dead volume was refused: %s", ev.Message)
			}
		}
		if took := ev.FirstTimestamp.Sub(shutdown); took > within {
			t.Fatalf("the Event came %s after the shutdown, more than %s", took, within)
		}
	})

	e.step("diag reports that volume with its own verdict, the others ok", func(t *testing.T) {
		rep := e.runDiag(t)
		for _, v := range rep.Volumes {
			t.Logf("diag %s/%s: %s %s", v.VMI, v.Volume, v.Verdict, v.Detail)
			switch {
			case v.Volume == dead.Name:
				assertDeadVerdict(t, v)
			case v.Verdict != diag.OK:
				t.Errorf("%s/%s: verdict %s (%s), want ok", v.VMI, v.Volume, v.Verdict, v.Detail)
			}
		}
		if len(rep.Volumes) != 4 || len(rep.Orphans) != 0 || rep.Problems != 1 {
			t.Fatalf("%d volumes, %d orphans, %d problems; want 4, 0, 1", len(rep.Volumes), len(rep.Orphans), rep.Problems)
		}
	})

	e.step("another VMI keeps attaching", func(t *testing.T) {
		b2 := b.addVolume("b2", "xfs", testutil.MinXFSSize)
		b.replaceAttachmentPod(hpB, []simnode.Volume{b1}, b1, b2)
		b.apply()
		b.waitMounted(b2)
		b.roundTrip(t, b2, "attached-beside-a-dead-source")
	})

	e.step("its unplug completes", func(t *testing.T) {
		a.RemoveVolume(dead.Name)
		a.apply()
		a.waitGone(dead)
		e.waitEvent(a.NS, a.Name, "VolumeUnmounted", "Volume dead ")
		e.eventually("nothing failed in the metrics", 30*time.Second, func() error {
			return e.volumeCount("Filesystem", "failed", 0)
		})
		if id := a.waitMounted(keep); id != keepID {
			t.Fatalf("keep was remounted: %d, was %d", id, keepID)
		}
		a.roundTrip(t, keep, "beside-the-dead-one")
		a.roundTrip(t, raw, "block-beside-the-dead-one")
	})

	e.step("no runner is stuck", func(t *testing.T) {
		if err := health(); err != nil {
			t.Fatal(err)
		}
		if err := e.opCount("abandoned", 0); err != nil {
			t.Fatal(err)
		}
	})
}

// assertDeadVerdict: the dead volume gets the verdict that says its source
// is gone, not a failure of diag itself.
func assertDeadVerdict(t *testing.T, v diag.Volume) {
	t.Helper()
	if v.Verdict != diag.DeadSource {
		t.Errorf("dead volume: verdict %s (%s), want %s", v.Verdict, v.Detail, diag.DeadSource)
	}
	if !strings.Contains(v.Detail, "input/output error") {
		t.Errorf("dead volume: detail %q says nothing of the dead source", v.Detail)
	}
	if v.Hint == "" {
		t.Errorf("dead volume: no hint")
	}
}

// runDiag runs the built `hpmount diag` on the simulated node with the
// agent's credentials, as `kubectl exec` into the agent pod would, and
// parses its JSON. It must exit 1 (problems found) within its deadline.
func (e *env) runDiag(t *testing.T) *diag.Report {
	t.Helper()
	bin, err := harness.Binary()
	e.must(err)
	ctx, cancel := context.WithTimeout(e.ctx, 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "diag", "--all", "-o", "json", "--mount-source", "mountinfo",
		"--kubeconfig", e.kubeconfig, "--node-name", e.node.Name, "--kubelet-root", e.node.KubeletRoot,
		"--host-proc", "/proc", "--host-pid", strconv.Itoa(os.Getpid()),
		"--cgroup-root", e.node.CgroupRoot, "--cgroup-mode", "v1")
	var stderr strings.Builder
	cmd.Stderr = &stderr
	start := time.Now()
	out, err := cmd.Output()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() != diag.ExitProblems {
		t.Fatalf("diag: %v after %s, want exit %d\n%s%s", err, time.Since(start).Round(time.Millisecond), diag.ExitProblems, out, stderr.String())
	}
	var rep diag.Report
	if err := json.Unmarshal(out, &rep); err != nil {
		t.Fatalf("diag output: %v\n%s", err, out)
	}
	t.Logf("diag took %s", time.Since(start).Round(time.Millisecond))
	return &rep
}

// volumeCount is nil once hpmount_volumes{mode,state} is n.
func (e *env) volumeCount(mode, state string, n int) error {
	return e.sample(fmt.Sprintf(`hpmount_volumes{mode=%q,state=%q}`, mode, state), n)
}

// opCount is nil while the engine calls of result sum to n over all ops.
func (e *env) opCount(result string, n int) error {
	text, err := e.agent.Scrape()
	if err != nil {
		return err
	}
	sum := 0.0
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, "hpmount_mount_operations_total{") && strings.Contains(line, fmt.Sprintf("result=%q", result)) {
			f, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
			if err != nil {
				return fmt.Errorf("metric line %q: %w", line, err)
			}
			sum += f
		}
	}
	if int(sum) != n {
		return fmt.Errorf("%v engine calls %s, want %d", sum, result, n)
	}
	return nil
}

func (e *env) sample(series string, n int) error {
	text, err := e.agent.Scrape()
	if err != nil {
		return err
	}
	for _, line := range strings.Split(text, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			if v != strconv.Itoa(n) {
				return fmt.Errorf("%s is %s, want %d", series, v, n)
			}
			return nil
		}
	}
	return fmt.Errorf("no %s in the scrape", series)
}

// watchHealth polls /healthz until the test ends; the returned func is
// nil unless an answer was not 200.
func (e *env) watchHealth() func() error {
	var mu sync.Mutex
	var first error
	polls := 0
	ctx, stop := context.WithCancel(e.ctx)
	e.root.Cleanup(stop)
	a := e.agent
	go func() {
		for ctx.Err() == nil {
			err := healthz(a)
			mu.Lock()
			polls++
			if err != nil && first == nil {
				first = fmt.Errorf("/healthz at poll %d: %w", polls, err)
			}
			mu.Unlock()
			select {
			case <-ctx.Done():
			case <-time.After(250 * time.Millisecond):
			}
		}
	}()
	return func() error {
		mu.Lock()
		defer mu.Unlock()
		if first == nil && polls == 0 {
			return errors.New("/healthz was never polled")
		}
		return first
	}
}

// healthz is nil while the agent's /healthz answers 200.
func healthz(a *harness.Agent) error {
	resp, err := healthClient.Get("http://" + a.HealthAddr + "/healthz")
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("healthz %d: %s", resp.StatusCode, body)
	}
	return nil
}

var healthClient = &http.Client{Timeout: 5 * time.Second}
