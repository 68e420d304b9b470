// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/hpmount/hpmount/test/cluster"
	"github.com/hpmount/hpmount/test/harness"
	"github.com/hpmount/hpmount/test/simnode"
)

const (
	nodeName    = "node-1"
	vmNamespace = "demo"
	vmName      = "vm1"
	// waitTimeout bounds every wait for the agent; a healthy run needs a
	// fraction of it.
	waitTimeout = harness.WaitTimeout
)

// demo is one control plane, one simulated node, the agent serving it and
// the VMI the steps change.
type demo struct {
	ctx     context.Context
	binary  string
	workDir string // kept after the run: the agent log lives here

	cluster  *cluster.Cluster
	kube     kubernetes.Interface
	dyn      dynamic.Interface
	ctrl     *simnode.Controller
	node     *simnode.Node
	adminKC  string
	agentKC  string
	agent    *harness.Agent
	agentLog string
	vm       *vm
	qemu     *vmQEMU // the VM's QEMU while it runs

	seenEvents map[string]int32 // event name -> count already printed
}

func newDemo(ctx context.Context, binary string) (*demo, error) {
	dir, err := os.MkdirTemp("", "hpmount-demo-")
	if err != nil {
		return nil, fmt.Errorf("work directory: %w", err)
	}
	return &demo{ctx: ctx, binary: binary, workDir: dir, agentLog: filepath.Join(dir, "agent.log"),
		seenEvents: map[string]int32{}}, nil
}

// run sets everything up and walks the steps.
func (d *demo) run(rbac string) error {
	title("hpmount demo: VM volume hotplug on a simulated node")
	fmt.Printf("binary %s, work directory %s\n", d.binary, d.workDir)
	if err := d.startControlPlane(); err != nil {
		return err
	}
	if err := d.applyRBAC(rbac); err != nil {
		return err
	}
	if err := d.startNode(); err != nil {
		return err
	}
	section("Agent")
	if err := d.startAgent(); err != nil {
		return err
	}
	if err := d.startVM(); err != nil {
		return err
	}
	return d.walk()
}

func (d *demo) startControlPlane() error {
	section("Control plane")
	c, err := harness.StartControlPlane(d.ctx, filepath.Join(d.workDir, "controlplane"))
	if err != nil {
		return err
	}
	d.cluster = c
	item("etcd + kube-apiserver at %s, ready in %s", c.Host(), c.ReadyAfter().Round(time.Millisecond))
	item("certificates, data and logs in %s", c.Dir())
	item("VirtualMachineInstance CRD installed (kubevirt.io/v1, no status subresource, as in KubeVirt)")
	admin := c.AdminConfig()
	if d.kube, err = kubernetes.NewForConfig(admin); err != nil {
		return err
	}
	if d.dyn, err = dynamic.NewForConfig(admin); err != nil {
		return err
	}
	d.ctrl = &simnode.Controller{Kube: d.kube, Dyn: d.dyn}
	d.adminKC = filepath.Join(d.workDir, "admin.kubeconfig")
	if err := cluster.WriteKubeconfig(d.adminKC, admin); err != nil {
		return fmt.Errorf("admin kubeconfig: %w", err)
	}
	item("admin kubeconfig (used by hpmount diag): %s", d.adminKC)
	return nil
}

// applyRBAC binds the agent's ClusterRole for real: the agent runs with a
// token of its ServiceAccount, so a permission it lacks fails the demo.
func (d *demo) applyRBAC(rbac string) error {
	d.agentKC = filepath.Join(d.workDir, "agent.kubeconfig")
	kinds, err := harness.AgentKubeconfig(d.ctx, d.cluster, d.ctrl, rbac, d.agentKC)
	if err != nil {
		return err
	}
	if rbac == "" {
		rbac = "deploy/rbac.yaml"
	}
	item("applied %s: %v", rbac, kinds)
	// The demo runs the agent with --report-volume-status, which needs
	// patch on VMIs: granted by the deploy/volume-status component only.
	vs, err := harness.GrantVolumeStatus(d.ctx, d.cluster)
	if err != nil {
		return err
	}
	item("applied %s: %v", harness.VolumeStatusRBAC, vs)
	item("the agent authenticates as system:serviceaccount:%s:%s", harness.AgentNamespace, harness.AgentServiceAccount)
	return nil
}

func (d *demo) startNode() error {
	section("Simulated node")
	n, err := simnode.New(nodeName, filepath.Join(d.workDir, "node"))
	if err != nil {
		return fmt.Errorf("simulated node: %w", err)
	}
	d.node = n
	item("%s: this process (pid %d) in a private mount namespace plays the host", nodeName, os.Getpid())
	item("kubelet root, a shared mount as on a real node, below called $KUBELET:")
	item("  KUBELET=%s", n.KubeletRoot)
	item("device cgroup (v1) subtree %s", n.CgroupRoot)
	return nil
}

// startVM creates namespace, VMI and virt-launcher pod, and the launcher's
// process: what virt-controller and the kubelet do before any hotplug.
func (d *demo) startVM() error {
	section("VirtualMachineInstance")
	hv, err := harness.NewVM(d.ctx, d.ctrl, d.node, vmNamespace, vmName)
	if err != nil {
		return err
	}
	v := &vm{VM: hv, d: d}
	d.vm = v
	item("VMI %s/%s (uid %s) on %s", vmNamespace, vmName, v.UID, nodeName)
	item("virt-launcher pod %s: process %d in a slave mount namespace, device cgroup denying all block devices", v.Launcher.Name, v.L.Pid)
	item("its hotplug-disks emptyDir, below called $HP:")
	item("  HP=%s", strings.Replace(d.node.HotplugDisksDir(string(v.Launcher.UID)), d.node.KubeletRoot, "$KUBELET", 1))
	return nil
}

// failed prints what helps to find out why a step failed.
func (d *demo) failed(err error) {
	if d.ctx.Err() != nil {
		return
	}
	fmt.Printf("\n!! %v\n", err)
	if d.vm != nil {
		_ = d.showEvents()
	}
	fmt.Printf("   agent log: %s\n", d.agentLog)
	if d.cluster != nil {
		fmt.Printf("   control plane logs: %s\n", d.cluster.Dir())
	}
}

// close undoes everything, newest first. The control plane's directory is
// kept when a step failed; the agent log is always kept.
func (d *demo) close(ok bool) {
	section("Cleanup")
	if d.agent != nil {
		d.agent.Kill()
		item("agent (pid %d) killed", d.agent.Pid())
	}
	if d.qemu != nil {
		item("the VM's QEMU (pid %d) stopped", d.qemu.Pid)
		d.stopQEMU()
	}
	if d.node != nil {
		d.node.Close()
		item("launcher stopped; mounts, loop devices and device cgroups removed")
	}
	if d.cluster != nil {
		if err := d.cluster.Stop(); err != nil {
			item("stopping the control plane: %v", err)
		} else {
			item("control plane stopped")
		}
		if ok {
			_ = os.RemoveAll(d.cluster.Dir())
		}
	}
	_ = os.RemoveAll(filepath.Join(d.workDir, "node"))
	for _, f := range []string{d.adminKC, d.agentKC} {
		if f != "" {
			_ = os.Remove(f)
		}
	}
	item("agent log kept: %s", d.agentLog)
}

// eventually retries f until it succeeds, timeout passes or the demo is
// interrupted.
func (d *demo) eventually(what string, timeout time.Duration, f func() error) error {
	return harness.Eventually(d.ctx, what, timeout, f)
}

// sleep waits d or until the demo is interrupted.
func (d *demo) sleep(dur time.Duration) error {
	select {
	case <-d.ctx.Done():
		return d.ctx.Err()
	case <-time.After(dur):
		return nil
	}
}
