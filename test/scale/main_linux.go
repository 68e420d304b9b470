// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/hpmount/hpmount/test/cluster"
	"github.com/hpmount/hpmount/test/harness"
	"github.com/hpmount/hpmount/test/simnode"
)

type options struct {
	binary      string
	out         string
	vmis        int
	volumes     int
	blockEvery  int
	mounts      int
	repeat      int
	attaches    int
	idle        time.Duration
	storm       time.Duration
	stormRate   int
	stormVMIs   int
	bigVMIs     int
	scrapeEvery time.Duration
	settle      time.Duration
	goBench     bool
	agentArgs   []string
	cpuProfile  string
	heapProfile string
	// startProfile is where the first cold start's CPU profile goes.
	startProfile string
	steps        string
	qemuVMIs     int
	// clusterClaims is how many claims the cluster holds for the claim
	// rows (claims_linux.go).
	clusterClaims int
}

func parseFlags() options {
	var o options
	flag.StringVar(&o.binary, "binary", "bin/hpmount", "the hpmount binary to run as the agent")
	flag.StringVar(&o.out, "out", "BENCHMARKS.md", "the report to write; empty prints it only")
	flag.IntVar(&o.vmis, "vmis", 250, "VMIs on the node")
	flag.IntVar(&o.volumes, "volumes", 4, "hotplug volumes per VMI")
	flag.IntVar(&o.blockEvery, "block-every", 4, "every n-th volume is a block volume (0: none)")
	flag.IntVar(&o.mounts, "mounts", 10000, "entries in the mount table before the agent starts")
	flag.IntVar(&o.repeat, "repeat", 3, "runs of each start-up measurement")
	flag.IntVar(&o.attaches, "attaches", 30, "single attaches measured on the loaded node")
	flag.DurationVar(&o.idle, "idle", time.Minute, "idle window for the CPU measurement (one resync period)")
	flag.DurationVar(&o.storm, "storm", time.Minute, "length of the storm of changes (0: skip)")
	flag.IntVar(&o.stormRate, "storm-rate", 200, "changes per second in the storm")
	flag.IntVar(&o.stormVMIs, "storm-vmis", 50, "VMIs the storm changes")
	flag.IntVar(&o.bigVMIs, "big-vmis", 500, "VMIs for the memory measurement (0: skip)")
	flag.DurationVar(&o.scrapeEvery, "scrape-every", 15*time.Second, "metrics scrape interval while the node settles before memory is read")
	flag.BoolVar(&o.goBench, "go-bench", true, "also run the Go benchmarks and add their section")
	flag.DurationVar(&o.settle, "settle", time.Minute, "time with nothing changing before the settled RSS is read")
	flag.StringVar(&o.cpuProfile, "cpu-profile", "", "save the agent's CPU profile of the idle window here (runs the agent with --profiling)")
	flag.IntVar(&o.qemuVMIs, "qemu-launchers", 20, "VMIs of the loaded node whose launcher runs a real QEMU for the VMI-change-to-QEMU row (0: skip)")
	flag.StringVar(&o.steps, "steps", "fresh,cold,claims,loaded,faults,fleet,big", "measurements to run, in this order")
	flag.IntVar(&o.clusterClaims, "cluster-claims", 20000, "claims in the cluster for the claim rows, the node's included")
	flag.StringVar(&o.startProfile, "start-profile", "", "save the agent's CPU profile of its first cold start (3 s from its exec) here (runs the agent with --profiling)")
	flag.StringVar(&o.heapProfile, "heap-profile", "", "save the agent's heap profile after the idle window here (runs the agent with --profiling)")
	flag.Func("agent-arg", "one more argument for the agent (repeatable), e.g. --agent-arg=--profiling", func(s string) error {
		o.agentArgs = append(o.agentArgs, s)
		return nil
	})
	flag.Parse()
	// The node as this harness measures it has mount events on (the repair
	// row needs them), whatever the agent's default may become; a later
	// --agent-arg=--mount-events=false still turns them off.
	o.agentArgs = append([]string{"--mount-events"}, o.agentArgs...)
	if o.cpuProfile != "" || o.heapProfile != "" || o.startProfile != "" {
		o.agentArgs = append(o.agentArgs, "--profiling")
	}
	return o
}

// env is the harness's world: control plane, simulated node, VMIs.
type env struct {
	opts     options
	ctx      context.Context
	dir      string
	cluster  *cluster.Cluster
	kube     kubernetes.Interface
	ctrl     *simnode.Controller
	node     *simnode.Node
	back     backing
	vms      []*vm
	agentKC  string
	adminKC  string
	agentLog string
	mountMu  sync.Mutex
	report   *report
	// otherClaims is how many claims of other namespaces the cluster
	// holds (claims_linux.go).
	otherClaims int
	// extra numbers the volumes attachRuns adds, across its calls.
	extra int
}

func main() {
	simnode.ReexecInPrivateNamespace()
	o := parseFlags()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, o); err != nil {
		fmt.Fprintln(os.Stderr, "scale:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, o options) error {
	if os.Geteuid() != 0 {
		return errors.New("the harness needs root (mounts, loop devices, cgroups)")
	}
	bin, err := filepath.Abs(o.binary)
	if err != nil {
		return err
	}
	o.binary = bin
	dir, err := os.MkdirTemp("", "hpmount-scale-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	e := &env{opts: o, ctx: ctx, dir: dir, agentLog: filepath.Join(dir, "agent.log"), report: newReport(o)}
	defer e.close()
	if err := e.setUp(); err != nil {
		return err
	}
	if err := e.measureAll(); err != nil {
		fmt.Printf("agent log: %s (kept)\n", e.keepLog())
		return err
	}
	return e.report.write(o.out)
}

func (e *env) setUp() error {
	start := time.Now()
	c, err := harness.StartControlPlane(e.ctx, filepath.Join(e.dir, "controlplane"))
	if err != nil {
		return err
	}
	e.cluster = c
	admin := c.AdminConfig()
	admin.QPS, admin.Burst = 2000, 4000
	e.kube = kubernetes.NewForConfigOrDie(admin)
	e.ctrl = &simnode.Controller{Kube: e.kube, Dyn: dynamic.NewForConfigOrDie(admin)}
	if err := e.agentCredentials(); err != nil {
		return err
	}
	if e.node, err = simnode.New(nodeName, filepath.Join(e.dir, "node")); err != nil {
		return err
	}
	fsVols, blockVols := e.volumeMix(e.opts.vmis)
	if err := e.makeBacking(fsVols, blockVols); err != nil {
		return err
	}
	if err := e.ctrl.EnsureNamespace(e.ctx, vmNS); err != nil {
		return err
	}
	if err := e.addVMs(e.ctx, 0, e.opts.vmis); err != nil {
		return err
	}
	n, err := e.padMountTable(e.opts.mounts)
	if err != nil {
		return err
	}
	e.report.setup = fmt.Sprintf("%d VMIs × %d volumes (%d filesystem, %d block), %d mountinfo entries before the agent; set up in %s",
		e.opts.vmis, e.opts.volumes, fsVols, blockVols, n, time.Since(start).Round(time.Second))
	fmt.Println(e.report.setup)
	return nil
}

func (e *env) volumeMix(vmis int) (fs, block int) {
	for i := range vmis {
		for _, v := range volumesOf(i, e.opts.volumes, e.opts.blockEvery) {
			if v.Block {
				block++
			} else {
				fs++
			}
		}
	}
	return fs, block
}

// agentCredentials binds deploy/rbac.yaml for real and writes kubeconfigs
// for the agent's ServiceAccount and for diag (admin).
func (e *env) agentCredentials() error {
	e.agentKC = filepath.Join(e.dir, "agent.kubeconfig")
	if _, err := harness.AgentKubeconfig(e.ctx, e.cluster, e.ctrl, "", e.agentKC); err != nil {
		return err
	}
	e.adminKC = filepath.Join(e.dir, "admin.kubeconfig")
	return cluster.WriteKubeconfig(e.adminKC, e.cluster.AdminConfig())
}

func (e *env) keepLog() string {
	kept := filepath.Join(os.TempDir(), "hpmount-scale-agent.log")
	if b, err := os.ReadFile(e.agentLog); err == nil {
		_ = os.WriteFile(kept, b, 0o644)
	}
	return kept
}

func (e *env) close() {
	if e.node != nil {
		e.node.Close()
	}
	if e.cluster != nil {
		_ = e.cluster.Stop()
	}
}
