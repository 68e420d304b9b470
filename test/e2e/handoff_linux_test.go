// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/hpmount/hpmount/test/cluster"
	"github.com/hpmount/hpmount/test/harness"
	"github.com/hpmount/hpmount/test/simnode"
)

// nodeSelector is the label selector of the VMI informer of node-2's
// agent (agent/informers.go); the migration target informer selects by
// kubevirt.io/migrationTargetNodeName.
const nodeSelector = "kubevirt.io/nodeName=node-2"

// TestHandoffEventOrders ends live migrations to node-2 label by label, as
// KubeVirt's two virt-handlers do: the source's moves
// kubevirt.io/nodeName to node-2, then the target's removes
// kubevirt.io/migrationTargetNodeName. Node-2's agent reads the VMI through
// two informers, one per label, which may deliver those updates in either
// order (#19, defect 1). In order, the VMI moves from the target cache to
// the node's. Out of order, the node informer's watch is held back at the
// API server proxy: the target informer's delete comes first and the VMI
// is in neither cache while its VM runs in the target launcher. Either
// way, across at least one full resync after each update, the target
// launcher keeps its one bind and its block node, node-2's agent detaches
// nothing, and data written through the source launcher reads back through
// the target's.
func TestHandoffEventOrders(t *testing.T) {
	e := newEnv(t)
	proxy := e.startAPIProxy()
	nodeB, agentB := e.startNodeWith("node-2", proxy.kubeconfig)

	e.step("in order: nodeName moves, then the target label goes", func(t *testing.T) {
		h := e.newHandoff(nodeB, agentB, "in-order")
		e.must(h.m.MoveNode(e.ctx))
		h.waitResyncs(2)
		h.assertHeld(t, "after nodeName moved")
		e.must(h.m.Finalize(e.ctx))
		h.waitResyncs(2)
		h.assertHeld(t, "after the target label went")
		h.retireSource(t)
	})

	e.step("API order: the target label goes while nodeName still names node-1", func(t *testing.T) {
		h := e.newHandoff(nodeB, agentB, "label-first")
		before := h.goneChecks()
		e.must(h.m.Finalize(e.ctx))
		e.eventually("two gone checks", 60*time.Second, func() error {
			if err := h.targetMounted(); err != nil {
				return harness.Stop(fmt.Errorf("%w; gone checks %v", err, harness.CounterDelta(before, h.goneChecks())))
			}
			if n := h.goneChecks()[`result="still-here"`] - before[`result="still-here"`]; n < 2 {
				return fmt.Errorf("%v still-here checks", n)
			}
			return nil
		})
		e.must(h.m.MoveNode(e.ctx))
		h.waitResyncs(2)
		h.assertHeld(t, "after nodeName moved")
	})

	e.step("out of order: the target informer's delete before the node informer's add", func(t *testing.T) {
		h := e.newHandoff(nodeB, agentB, "reordered")
		proxy.Hold(nodeSelector)
		released := false
		defer func() {
			if !released {
				proxy.Release(nodeSelector)
			}
		}()
		before := h.goneChecks()
		e.must(h.m.MoveNode(e.ctx))
		e.must(h.m.Finalize(e.ctx))
		// The VMI is in neither cache of node-2's agent now. Two checks
		// with the API server (the first, then its recheck) make a full
		// cycle in which a detach would have happened.
		e.eventually("node-2's agent confirms twice that the VMI is still here", 60*time.Second, func() error {
			if err := h.targetMounted(); err != nil {
				return harness.Stop(err)
			}
			if n := h.goneChecks()[`result="still-here"`] - before[`result="still-here"`]; n < 2 {
				return fmt.Errorf("%v still-here checks", n)
			}
			return nil
		})
		h.assertHeld(t, "while the VMI is in neither cache")
		proxy.Release(nodeSelector)
		released = true
		h.waitResyncs(2)
		h.assertHeld(t, "after the node informer caught up")
		h.retireSource(t)
	})
}

// handoff is one VMI migrating from node-1 to node-2, with what its
// target launcher held when the handoff began.
type handoff struct {
	e      *env
	v      *vm
	m      *harness.Migration
	agent  *harness.Agent
	data   simnode.Volume
	raw    simnode.Volume
	mount  int    // the bind on the target's data entry
	inode  uint64 // the target's block node
	ops    map[string]float64
	logLen int
}

// newHandoff starts a VMI with a filesystem and a block volume on node-1,
// writes through its launcher, and migrates it to node until node's
// launcher reads the data back.
func (e *env) newHandoff(node *simnode.Node, agent *harness.Agent, name string) *handoff {
	e.t.Helper()
	v := e.newVM("tenant-h", name)
	h := &handoff{e: e, v: v, agent: agent, data: v.addVolume("data", "ext4", 64<<20), raw: v.addVolume("raw", "", 32<<20)}
	v.newAttachmentPod(h.data, h.raw)
	v.apply()
	v.waitMounted(h.data)
	v.waitNode(h.raw)
	v.roundTrip(e.t, h.data, "written-on-node-1")
	v.roundTrip(e.t, h.raw, "block-on-node-1")
	var err error
	h.m, err = v.StartMigration(e.ctx, node)
	e.must(err)
	e.eventually("target launcher reads the data", 60*time.Second, func() error {
		return readsBack(h.m, h.data, "written-on-node-1", h.raw, "block-on-node-1")
	})
	e.waitEvent(v.NS, v.Name, "MigrationTargetReady", "All 2 hotplug volumes")
	top, n := e.table().Top(h.m.TargetPath(h.data))
	if top == nil || n != 1 {
		e.t.Fatalf("target data entry: %d mounts before the handoff ends", n)
	}
	h.mount, h.inode = top.ID, e.inode(h.m.TargetPath(h.raw))
	h.ops, h.logLen = h.operations(), len(agent.Log())
	return h
}

// targetMounted is nil while the target launcher still has its one bind
// and its block node, both as the handoff began.
func (h *handoff) targetMounted() error {
	t, err := harness.HostTable()
	if err != nil {
		return err
	}
	top, n := t.Top(h.m.TargetPath(h.data))
	switch {
	case top == nil:
		return fmt.Errorf("the target launcher's %s is not mounted any more", h.data.Name)
	case n != 1 || top.ID != h.mount:
		return fmt.Errorf("the target launcher's %s: %d mounts, top %d; was the one mount %d", h.data.Name, n, top.ID, h.mount)
	}
	if got := h.e.inode(h.m.TargetPath(h.raw)); got != h.inode {
		return fmt.Errorf("the target launcher's block node %s replaced: inode %d, was %d", h.raw.Name, got, h.inode)
	}
	return nil
}

// assertHeld fails t unless the target launcher holds the volumes as when
// the handoff began, reads and writes them, and node-2's agent neither
// detached nor forgot anything since.
func (h *handoff) assertHeld(t *testing.T, when string) {
	t.Helper()
	if err := h.targetMounted(); err != nil {
		t.Fatalf("%s: %v", when, err)
	}
	if h.v.L != h.m.L {
		t.Fatalf("%s: the VM does not run in the target launcher yet", when)
	}
	// Written through the target launcher, read from the volumes' own
	// sources and back through the target launcher.
	pattern := strings.ReplaceAll(when, " ", "-")
	h.v.roundTrip(t, h.data, pattern)
	h.v.roundTrip(t, h.raw, pattern)
	if err := readsBack(h.m, h.data, pattern, h.raw, pattern); err != nil {
		t.Fatalf("%s: %v", when, err)
	}
	for k, d := range harness.CounterDelta(h.ops, h.operations()) {
		if strings.HasPrefix(k, `op="detach"`) && d != 0 {
			t.Fatalf("%s: node-2's agent made %v detach calls (%s)", when, d, k)
		}
	}
	log := h.agent.Log()[h.logLen:]
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, `"op":"detach"`) || strings.Contains(line, "forgetting it") && strings.Contains(line, h.v.Name) {
			t.Fatalf("%s: node-2's agent logged %s", when, line)
		}
	}
}

// waitResyncs waits for n full resync periods of node-2's agent, counted by
// its periodic re-verification of block nodes: every resync pass of a VMI
// verifies each of its block volumes once, and the agent serves one per
// migrated VMI. n+1 periods' worth of verifies cannot fit in fewer than
// n+1 periods, so at least n whole periods passed.
func (h *handoff) waitResyncs(n int) {
	h.e.t.Helper()
	before := h.verifies()
	served := h.served()
	h.e.eventually(fmt.Sprintf("%d resyncs of node-2's agent", n), 60*time.Second, func() error {
		if err := h.targetMounted(); err != nil {
			return harness.Stop(err)
		}
		if got := h.verifies() - before; got < float64((n+1)*served) {
			return fmt.Errorf("%v block verifies, want %d", got, (n+1)*served)
		}
		return nil
	})
}

// served is how many VMIs node-2's agent serves, each with one block
// volume mounted: the migrated ones, this one included.
func (h *handoff) served() int {
	text, err := h.agent.Scrape()
	h.e.must(err)
	n := 0
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, `hpmount_volumes{mode="Block",state="mounted"} `) {
			var v float64
			if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
				n += int(v)
			}
		}
	}
	return max(n, 1)
}

func (h *handoff) verifies() float64 {
	sum := 0.0
	for k, v := range h.operations() {
		if strings.HasPrefix(k, `op="verify"`) {
			sum += v
		}
	}
	return sum
}

func (h *handoff) operations() map[string]float64 {
	text, err := h.agent.Scrape()
	h.e.must(err)
	ops, err := harness.Counters(text, "hpmount_mount_operations_total")
	h.e.must(err)
	return ops
}

// goneChecks reads node-2's hpmount_vmi_gone_checks_total; none yet is an
// empty map.
func (h *handoff) goneChecks() map[string]float64 {
	text, err := h.agent.Scrape()
	h.e.must(err)
	checks, err := harness.Counters(text, "hpmount_vmi_gone_checks_total")
	if err != nil {
		return map[string]float64{}
	}
	return checks
}

// retireSource deletes the source launcher: node-1 is cleaned, node-2 keeps
// its mounts and serves the VM.
func (h *handoff) retireSource(t *testing.T) {
	t.Helper()
	e := h.e
	e.must(h.m.RetireSource(e.ctx))
	e.waitEvent(h.v.NS, h.v.Name, "MigrationSourceCleaned", "node-1")
	h.waitResyncs(1)
	h.assertHeld(t, "after the source launcher went")
}

// apiProxy is the proxy between node-2's agent and the API server, and the
// kubeconfig that goes through it.
type apiProxy struct {
	*harness.APIProxy
	kubeconfig string
}

// startAPIProxy starts a proxy to the API server with the agent's
// credentials and writes a kubeconfig through it.
func (e *env) startAPIProxy() *apiProxy {
	e.t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", e.kubeconfig)
	e.must(err)
	p, err := harness.StartAPIProxy(cfg)
	e.must(err)
	e.root.Cleanup(func() { _ = p.Close() })
	path := filepath.Join(e.root.TempDir(), "proxied.kubeconfig")
	e.must(cluster.WriteKubeconfig(path, p.Config(cfg)))
	return &apiProxy{APIProxy: p, kubeconfig: path}
}

// startNodeWith is startNode with the agent's API server access through
// kubeconfig.
func (e *env) startNodeWith(name, kubeconfig string) (*simnode.Node, *harness.Agent) {
	e.t.Helper()
	n, err := simnode.New(name, e.root.TempDir())
	e.must(err)
	e.root.Cleanup(n.Close)
	bin, err := harness.Binary()
	e.must(err)
	a, err := harness.StartAgent(harness.AgentOptions{Binary: bin, Kubeconfig: kubeconfig, Node: n, Args: e.agentArgs})
	e.must(err)
	e.root.Cleanup(func() {
		a.Kill()
		if e.root.Failed() {
			e.t.Logf("agent of %s log:\n%s", name, a.Log())
		}
	})
	e.eventually("agent of "+name+" ready", 60*time.Second, a.Ready)
	return n, a
}
