// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/hpmount/hpmount/test/cluster"
	"github.com/hpmount/hpmount/test/harness"
	"github.com/hpmount/hpmount/test/simnode"
)

// The cluster simulation (issue #23): one API server, the cluster's claims
// and fleetNodes agents, each on a node of its own. The scale node is one
// of them, with its real mounts; the others are simulated nodes with
// nothing published (their VMIs, launchers and attachment pods exist only
// in the API), which is enough for what the rows measure: what each agent
// holds and receives, and what the API server sees after an outage.
const (
	fleetNodes = 20
	// fleetOutage is how long the API server is down.
	fleetOutage = time.Minute
	// fleetTargetNodes is the cluster the rows are extrapolated to.
	fleetTargetNodes = 1000
)

// fleetAgent is one agent of the simulation and the proxy that counts
// what the API server sends it.
type fleetAgent struct {
	node  *simnode.Node
	vmis  int
	a     *agent
	proxy *harness.CountingProxy
	told  bool // the simulation said what the agent does not watch again
}

// measureFleet runs the cluster simulation and adds its rows.
func (e *env) measureFleet() error {
	if err := e.ensureOtherClaims(); err != nil {
		return err
	}
	start := time.Now()
	nodes, err := e.fleetNodes()
	defer func() {
		for _, n := range nodes {
			n.Close()
		}
	}()
	if err != nil {
		return err
	}
	fmt.Printf("   %d VMIs on %d more nodes created in %s\n", (fleetNodes-1)*len(e.vms), fleetNodes-1, time.Since(start).Round(time.Second))
	agents, err := e.startFleet(nodes)
	defer func() {
		for _, f := range agents {
			f.a.stop()
			f.proxy.Close()
		}
	}()
	if err != nil {
		return err
	}
	startKiB, err := e.fleetStart(agents)
	if err != nil {
		return err
	}
	return e.fleetOutage(agents, startKiB)
}

// ensureOtherClaims fills the cluster with the claims of the rest of the
// cluster, unless the claims step did.
func (e *env) ensureOtherClaims() error {
	if e.otherClaims > 0 {
		return nil
	}
	n := e.opts.clusterClaims - e.total()
	if err := e.createOtherClaims(n); err != nil {
		return err
	}
	e.otherClaims = n
	return nil
}

// fleetNodes makes the simulated nodes and their VMIs: as many VMIs on
// each as on the scale node, each with the scale node's number of volumes,
// which name the other claims of the cluster.
func (e *env) fleetNodes() ([]*simnode.Node, error) {
	var nodes []*simnode.Node
	for k := 1; k < fleetNodes; k++ {
		n, err := simnode.New(fmt.Sprintf("fleet-%02d", k), filepath.Join(e.dir, fmt.Sprintf("fleet-%02d", k)))
		if err != nil {
			return nodes, err
		}
		nodes = append(nodes, n)
		// The agent's readiness gate looks at the kubelet's pods
		// directory, which these nodes, with no pod of their own on
		// disk, would not have.
		if err := os.MkdirAll(n.Path("pods"), 0o750); err != nil {
			return nodes, err
		}
	}
	err := inParallel(len(nodes)*len(e.vms), func(g int) error { return e.addFleetVM(nodes[g/len(e.vms)].Name, g) })
	if err != nil {
		return nodes, fmt.Errorf("create the fleet's VMIs: %w", err)
	}
	return nodes, nil
}

// addFleetVM creates VMI g of the fleet on node: its launcher, its
// attachment pod and the VMI, whose volumes name claims of one of the
// other namespaces (createOtherClaim spreads claim i over them by i).
func (e *env) addFleetVM(node string, g int) error {
	ns := g % otherNamespaces
	perNS := e.otherClaims / otherNamespaces
	name := fmt.Sprintf("fleet-vm%05d", g)
	var vols []simnode.Volume
	for m := range e.opts.volumes {
		i := ns + otherNamespaces*((e.opts.volumes*(g/otherNamespaces)+m)%perNS)
		vols = append(vols, simnode.Volume{Name: fmt.Sprintf("d%d", m), Claim: fmt.Sprintf("claim-%d", i),
			PV: fmt.Sprintf("pv-other-%d", i), Capacity: "1Gi"})
	}
	namespace := fmt.Sprintf("other-%d", ns)
	shell, err := e.ctrl.CreateVMIShell(e.ctx, namespace, name, node)
	if err != nil {
		return fmt.Errorf("create vmi %s: %w", name, err)
	}
	launcher, err := e.ctrl.CreateLauncherPod(e.ctx, namespace, name, shell.GetUID(), node)
	if err != nil {
		return err
	}
	if _, err := e.ctrl.CreateAttachmentPod(e.ctx, launcher, vols); err != nil {
		return err
	}
	// The volumes' status names no attachment pod yet: nothing is
	// published on these nodes, and an agent told of a pod would retry
	// its attach for ever. Such a volume waits quietly; its claim is
	// still read, by the attachment pod that names it.
	s := simnode.VMISpec{Namespace: namespace, Name: name, Node: node, Launcher: launcher.UID, Volumes: vols}
	if _, err := e.ctrl.ApplyVMI(e.ctx, s); err != nil {
		return fmt.Errorf("apply vmi %s: %w", name, err)
	}
	return nil
}

// startFleet starts every agent at once, the scale node's among them,
// each through a proxy that counts what it receives.
func (e *env) startFleet(nodes []*simnode.Node) ([]*fleetAgent, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", e.agentKC)
	if err != nil {
		return nil, err
	}
	log, err := os.OpenFile(e.agentLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer log.Close()
	var agents []*fleetAgent
	for k, n := range append([]*simnode.Node{e.node}, nodes...) {
		p, err := harness.StartCountingProxy(cfg, "")
		if err != nil {
			return agents, err
		}
		kc := filepath.Join(e.dir, fmt.Sprintf("fleet-%02d.kubeconfig", k))
		if err := cluster.WriteKubeconfig(kc, p.Config(cfg)); err != nil {
			p.Close()
			return agents, err
		}
		h, err := harness.StartAgent(harness.AgentOptions{Binary: e.opts.binary, Kubeconfig: kc, Node: n,
			Resync: time.Minute, Args: e.opts.agentArgs, Log: log})
		if err != nil {
			p.Close()
			return agents, err
		}
		a := &agent{Agent: h, metrics: h.MetricsAddr, started: h.Started, cmd: h.Cmd, done: h.Done()}
		agents = append(agents, &fleetAgent{node: n, vmis: len(e.vms), a: a, proxy: p})
	}
	return agents, nil
}

// settledStart waits until the agent synced and has made a first pass of
// every VMI of its node with nothing left queued.
func (f *fleetAgent) settledStart() error {
	for deadline := time.Now().Add(waitLimit); time.Now().Before(deadline); time.Sleep(fleetPoll) {
		select {
		case <-f.a.done:
			return fmt.Errorf("the agent exited")
		default:
		}
		if !f.a.ready() {
			continue
		}
		m, err := f.a.scrape()
		if err == nil && m.hist("hpmount_reconcile_duration_seconds").count >= uint64(f.vmis) &&
			m.sum("workqueue_depth", nil) == 0 {
			return nil
		}
	}
	return fmt.Errorf("not ready with a first pass of its %d VMIs within %s", f.vmis, waitLimit)
}

// fleetPoll is how often the simulation asks its agents how far they are:
// twenty agents share the harness's two cores with the API server.
const fleetPoll = 200 * time.Millisecond

// fleetStart waits for every agent's start and adds the rows of what each
// holds and received by then.
func (e *env) fleetStart(agents []*fleetAgent) (maxKiB float64, err error) {
	var peaks, kibs []float64
	for _, f := range agents {
		if err := f.settledStart(); err != nil {
			return 0, fmt.Errorf("agent of %s did not finish its start: %w", f.node.Name, err)
		}
	}
	for _, f := range agents {
		p, err := harness.ReadProcStat(f.a.cmd.Process.Pid)
		if err != nil {
			return 0, err
		}
		peaks = append(peaks, float64(p.Peak)/(1<<20))
		kibs = append(kibs, kib(f.proxy.Count().Bytes))
	}
	cl := fmt.Sprintf("%d agents, %d VMIs and %d claims in the cluster", len(agents), len(agents)*len(e.vms), e.otherClaims+e.total())
	e.report.add(row{what: "cluster: each agent's RSS high-water mark (VmHWM) at the end of its start, " + cl, unit: "MiB",
		runs: peaks, targetOn: "p99", target: 96,
		note: "one run per agent; target: the high-water mark asked of the node's own agent"})
	e.report.add(row{what: "cluster: bytes each agent received from the API server during its start, " + cl, unit: "KiB",
		runs: kibs, targetOn: "p99", target: kib(int64(len(e.vms)) * fleetBytesPerVMI),
		note: fmt.Sprintf("one run per agent; every resource; target: %d KiB per VMI of the node, whatever the cluster holds",
			fleetBytesPerVMI/1024)})
	return slices.Max(kibs), nil
}

// fleetBytesPerVMI is what an agent may receive at start per VMI of its
// node: the VMI, its launcher and attachment pods and its claims as the
// API server sends them, with room to spare.
const fleetBytesPerVMI = 32 << 10

// fleetOutage stops the API server for fleetOutage, starts it again and
// adds the rows of what the agents did: requests in the minute after, and
// the time until each agent watches every stream it watched before.
func (e *env) fleetOutage(agents []*fleetAgent, startKiB float64) error {
	// Each agent reaches the server through its proxy, which goes down
	// and up with it: its clients then see broken connections and
	// refused ones, as the clients of a stopped server do.
	for _, f := range agents {
		f.proxy.Down()
	}
	if err := e.cluster.StopAPIServer(); err != nil {
		return err
	}
	down := time.Now()
	time.Sleep(fleetOutage) // the outage itself: nothing to wait for
	if err := e.cluster.StartAPIServer(e.ctx); err != nil {
		return err
	}
	for _, f := range agents {
		if err := f.proxy.Up(); err != nil {
			return err
		}
	}
	back := time.Now()
	var caught time.Duration
	for _, f := range agents {
		d, err := f.caughtUp(down, back)
		if err != nil {
			return fmt.Errorf("agent of %s: %w", f.node.Name, err)
		}
		caught = max(caught, d)
	}
	window := time.Minute
	time.Sleep(time.Until(back.Add(window))) // the window measured
	var log []harness.Request
	for _, f := range agents {
		for _, r := range f.proxy.Log() {
			if !r.At.Before(back) && r.At.Before(back.Add(window)) {
				log = append(log, r)
			}
		}
	}
	e.addOutageRows(len(agents), log, back, caught, startKiB)
	return nil
}

// caughtUp waits until the agent watches again every stream it watched
// before the outage, and says how long after back it took.
func (f *fleetAgent) caughtUp(down, back time.Time) (time.Duration, error) {
	streams := map[string]bool{}
	for _, r := range f.proxy.Log() {
		if r.Kind == "WATCH" && r.Status == 200 && r.At.Before(down) {
			streams[r.Stream] = true
		}
	}
	if len(streams) == 0 {
		return 0, fmt.Errorf("no watch before the outage")
	}
	for deadline := time.Now().Add(waitLimit); time.Now().Before(deadline); time.Sleep(fleetPoll) {
		again := map[string]time.Time{}
		for _, r := range f.proxy.Log() {
			if r.Kind == "WATCH" && r.Status == 200 && !r.At.Before(back) && streams[r.Stream] && again[r.Stream].IsZero() {
				again[r.Stream] = r.At
			}
		}
		if len(again) < len(streams) {
			if time.Since(back) > 2*time.Minute && !f.told {
				f.told = true
				var missing []string
				for st := range streams {
					if again[st].IsZero() {
						missing = append(missing, st)
					}
				}
				seen := map[string]int{}
				for _, r := range f.proxy.Log() {
					if !r.At.Before(back) {
						seen[fmt.Sprintf("%s %s %s %d", r.Kind, r.Resource, r.Stream, r.Status)]++
					}
				}
				fmt.Printf("   agent of %s still does not watch %v again; since: %v\n", f.node.Name, missing, seen)
			}
			continue
		}
		var last time.Time
		for _, at := range again {
			last = later(last, at)
		}
		return last.Sub(back), nil
	}
	return 0, fmt.Errorf("%d streams not watched again within %s", len(streams), waitLimit)
}

func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// fleetPerAgent is what one agent may ask of the API server in the minute
// after an outage: a list and a watch for each of its informers, and the
// readiness gate's probes.
const fleetPerAgent = 10

// addOutageRows adds the outage rows from the requests the API server
// answered in the minute after it came back, and extrapolates them and
// the start to fleetTargetNodes nodes.
func (e *env) addOutageRows(agents int, log []harness.Request, back time.Time, caught time.Duration, startKiB float64) {
	perSecond := map[int]int{}
	lists := map[string]int{}
	for _, r := range log {
		perSecond[int(r.At.Sub(back)/time.Second)]++
		if r.Kind == "LIST" || r.Initial {
			lists[r.Resource]++
		}
	}
	peak := 0
	for _, n := range perSecond {
		peak = max(peak, n)
	}
	spread := fleetOutage / 4 // the gate releases the waiters over this (agent/gate.go)
	out := fmt.Sprintf("after a %s outage, %d agents", fleetOutage, agents)
	e.report.add(row{what: "cluster: requests the API server answered in the minute after it came back, " + out, unit: "requests",
		runs: []float64{float64(len(log))}, target: fleetPerAgent * float64(agents),
		note: fmt.Sprintf("lists by resource: %s; target: %d per agent, a list and a watch per informer and the gate's probes",
			requests(lists), fleetPerAgent)})
	e.report.add(row{what: "cluster: peak requests in one second of that minute, " + out, unit: "requests/s",
		runs: []float64{float64(peak)}, target: 2 * fleetPerAgent * float64(agents) / spread.Seconds(),
		note: fmt.Sprintf("target: twice the mean if every agent's requests were spread over %s, as the gate spreads its releases", spread)})
	e.report.add(row{what: "cluster: time from the API server's return until every agent watches again each stream it watched before, " + out,
		unit: "s", runs: []float64{caught.Seconds()}, target: (spread + 5*time.Second).Seconds(),
		note: fmt.Sprintf("target: the gate's spread, %s, and 5 s", spread)})
	scaleUp := float64(fleetTargetNodes) / float64(agents)
	e.report.add(row{what: fmt.Sprintf("%d nodes, extrapolated: bytes the API server sends to start every agent", fleetTargetNodes),
		unit: "MiB", runs: []float64{startKiB * fleetTargetNodes / 1024},
		note: "the largest start above times the nodes: an agent receives its node's objects, not the cluster's"})
	e.report.add(row{what: fmt.Sprintf("%d nodes, extrapolated: requests in the minute after the outage, and their peak per second", fleetTargetNodes),
		unit: "requests", runs: []float64{float64(len(log)) * scaleUp},
		note: fmt.Sprintf("peak %s requests/s; the rows above times %s", num(float64(peak)*scaleUp), num(scaleUp))})
	e.report.explain("fleet", fmt.Sprintf("The cluster rows run %d agents against one API server at once, each on a node of its own: "+
		"the scale node with its mounts, and simulated nodes whose VMIs, launchers and attachment pods exist only in the API. "+
		"Each agent talks to the server through a proxy that counts what it receives and logs each request the server answered; "+
		"the proxy goes down and up with the server, so the agents see their connections broken and new ones refused, "+
		"as the clients of a stopped server do. A list counts whether it is a LIST or a watch that lists first "+
		"(sendInitialEvents, how client-go's informers list). "+
		"At %d nodes the minute after an outage brings about %s lists of pods and %s of VMIs. "+
		"A list of a node's pods is served from the watch cache by its field selector; a list of a node's VMIs, by a label, "+
		"filters every VMI of the cluster, so its cost grows with the cluster as well as with the nodes. "+
		"That relist is where API Priority and Fairness has to protect the server: a FlowSchema for the agent's ServiceAccount "+
		"with a priority level of its own and queuing keeps the agents' lists waiting in their queue "+
		"while the kubelets' and controllers' requests go on.",
		agents, fleetTargetNodes, num(float64(lists["pods"])*scaleUp), num(float64(lists["virtualmachineinstances"])*scaleUp)))
}
