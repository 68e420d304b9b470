// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package e2e

import (
	"context"
	"path/filepath"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/mountinfo"
	"github.com/hpmount/hpmount/test/cluster"
	"github.com/hpmount/hpmount/test/harness"
	"github.com/hpmount/hpmount/test/simnode"
)

func TestMain(m *testing.M) { testutil.RunInPrivateMountNamespace(m) }

const nodeName = "node-1"

// env is one control plane, one simulated node and the agent serving it.
type env struct {
	t          *testing.T // the running step, or root
	root       *testing.T
	ctx        context.Context
	cluster    *cluster.Cluster
	kube       kubernetes.Interface
	dyn        dynamic.Interface
	ctrl       *simnode.Controller
	node       *simnode.Node
	kubeconfig string
	agent      *harness.Agent
	agentArgs  []string
}

func newEnv(t *testing.T, agentArgs ...string) *env {
	t.Helper()
	testutil.RequiresRoot(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	c := cluster.Start(t)
	if err := c.InstallVMICRD(ctx); err != nil {
		t.Fatal(err)
	}
	admin := c.AdminConfig()
	e := &env{t: t, root: t, ctx: ctx, cluster: c, kube: kubernetes.NewForConfigOrDie(admin), dyn: dynamic.NewForConfigOrDie(admin)}
	e.ctrl = &simnode.Controller{Kube: e.kube, Dyn: e.dyn}
	// The agent runs with a token of its ServiceAccount bound by
	// deploy/rbac.yaml: a permission it lacks fails the tests.
	e.kubeconfig = filepath.Join(t.TempDir(), "agent.kubeconfig")
	_, err := harness.AgentKubeconfig(ctx, c, e.ctrl, "", e.kubeconfig)
	e.must(err)
	// Patching VMIs is granted only with the flag that needs it, as the
	// deploy/volume-status component does.
	if slices.Contains(agentArgs, "--report-volume-status") {
		_, err := harness.GrantVolumeStatus(ctx, c)
		e.must(err)
	}
	node, err := simnode.New(nodeName, t.TempDir())
	e.must(err)
	t.Cleanup(node.Close)
	e.node = node
	e.agentArgs = agentArgs
	e.startAgent()
	return e
}

func (e *env) must(err error) {
	e.t.Helper()
	if err != nil {
		e.t.Fatal(err)
	}
}

// startAgent runs the agent with the simulated node as its host: this test
// process's private mount namespace and mountinfo.
func (e *env) startAgent() {
	e.t.Helper()
	bin, err := harness.Binary()
	e.must(err)
	a, err := harness.StartAgent(harness.AgentOptions{Binary: bin, Kubeconfig: e.kubeconfig, Node: e.node, Args: e.agentArgs})
	e.must(err)
	e.agent = a
	// The agent outlives the step that (re)started it.
	e.root.Cleanup(func() {
		a.Kill()
		if e.root.Failed() {
			e.t.Logf("agent log:\n%s", a.Log())
		}
	})
	e.eventually("agent ready", 60*time.Second, a.Ready)
}

// eventually retries f until it succeeds or timeout passes.
func (e *env) eventually(what string, timeout time.Duration, f func() error) {
	e.t.Helper()
	e.must(harness.Eventually(e.ctx, what, timeout, f))
}

// table reads the simulated host's mount table.
func (e *env) table() *mountinfo.Table {
	e.t.Helper()
	t, err := harness.HostTable()
	e.must(err)
	return t
}

// events lists the Events about one VMI.
func (e *env) events(ns, vmi string) []corev1.Event {
	e.t.Helper()
	events, err := harness.Events(e.ctx, e.kube, ns, vmi)
	e.must(err)
	return events
}

// waitEvent waits for an Event with reason whose message contains substr.
func (e *env) waitEvent(ns, vmi, reason, substr string) corev1.Event {
	e.t.Helper()
	var found corev1.Event
	e.eventually("event "+reason+" "+substr, 60*time.Second, func() (err error) {
		found, err = harness.FindEvent(e.ctx, e.kube, ns, vmi, reason, substr)
		return err
	})
	return found
}

// step runs one scenario step as a subtest; the env's helpers fail the
// step, not the parent test.
func (e *env) step(name string, f func(t *testing.T)) bool {
	parent := e.t
	defer func() { e.t = parent }()
	return parent.Run(name, func(t *testing.T) {
		e.t = t
		f(t)
	})
}
