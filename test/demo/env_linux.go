package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/hpmount/hpmount/test/cluster"
	"github.com/hpmount/hpmount/test/simnode"
)

const (
	nodeName    = "node-1"
	vmNamespace = "demo"
	vmName      = "vm1"
	agentNS     = "hpmount-system"
	agentSA     = "hpmount"
	// waitTimeout bounds every wait for the agent; a healthy run needs a
	// fraction of it.
	waitTimeout = 30 * time.Second
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
	agent    *agentProcess
	agentLog string
	vm       *vm

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
	dir := filepath.Join(d.workDir, "controlplane")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return err
	}
	c, err := cluster.StartProcess(d.ctx, cluster.Options{WorkDir: dir})
	if err != nil {
		return fmt.Errorf("start control plane: %w", err)
	}
	d.cluster = c
	item("etcd + kube-apiserver at %s, ready in %s", c.Host(), c.ReadyAfter().Round(time.Millisecond))
	item("certificates, data and logs in %s", c.Dir())
	if err := c.InstallVMICRD(d.ctx); err != nil {
		return fmt.Errorf("install VMI CRD: %w", err)
	}
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
func (d *demo) applyRBAC(path string) error {
	manifest, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("read rbac: %w", err)
	}
	if err := d.ctrl.EnsureNamespace(d.ctx, agentNS); err != nil {
		return err
	}
	objs, err := cluster.ApplyManifests(d.ctx, d.cluster.AdminConfig(), manifest, false)
	if err != nil {
		return fmt.Errorf("apply %q: %w", path, err)
	}
	cfg, err := d.cluster.ServiceAccountConfig(d.ctx, agentNS, agentSA)
	if err != nil {
		return fmt.Errorf("service account token: %w", err)
	}
	d.agentKC = filepath.Join(d.workDir, "agent.kubeconfig")
	if err := cluster.WriteKubeconfig(d.agentKC, cfg); err != nil {
		return fmt.Errorf("agent kubeconfig: %w", err)
	}
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.GetKind()+"/"+o.GetName())
	}
	item("applied %s: %v", path, kinds)
	item("the agent authenticates as system:serviceaccount:%s:%s", agentNS, agentSA)
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
	if err := d.ctrl.EnsureNamespace(d.ctx, vmNamespace); err != nil {
		return err
	}
	shell, err := d.ctrl.CreateVMIShell(d.ctx, vmNamespace, vmName, nodeName)
	if err != nil {
		return fmt.Errorf("create vmi: %w", err)
	}
	v := &vm{d: d, uid: shell.GetUID(), disks: map[string]*simnode.Disk{}, attach: map[string]string{}}
	if v.launcher, err = d.ctrl.CreateLauncherPod(d.ctx, vmNamespace, vmName, v.uid, nodeName); err != nil {
		return fmt.Errorf("create launcher pod: %w", err)
	}
	if v.l, err = d.node.StartLauncher(string(v.launcher.UID)); err != nil {
		return fmt.Errorf("start launcher: %w", err)
	}
	d.vm = v
	item("VMI %s/%s (uid %s) on %s", vmNamespace, vmName, v.uid, nodeName)
	item("virt-launcher pod %s: process %d in a slave mount namespace, device cgroup denying all block devices", v.launcher.Name, v.l.Pid)
	item("its hotplug-disks emptyDir, below called $HP:")
	item("  HP=%s", strings.Replace(d.node.HotplugDisksDir(string(v.launcher.UID)), d.node.KubeletRoot, "$KUBELET", 1))
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
		d.agent.kill()
		item("agent (pid %d) killed", d.agent.cmd.Process.Pid)
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

// eventually retries f every 100ms until it succeeds, timeout passes or
// the demo is interrupted.
func (d *demo) eventually(what string, timeout time.Duration, f func() error) error {
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return nil
		}
		var stop *stopError
		if errors.As(err, &stop) {
			return fmt.Errorf("%s: %w", what, stop.err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: not within %s: %w", what, timeout, err)
		}
		select {
		case <-d.ctx.Done():
			return fmt.Errorf("%s: %w", what, d.ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// stopError ends an eventually at once: waiting longer cannot help.
type stopError struct{ err error }

func (e *stopError) Error() string { return e.err.Error() }

// sleep waits d or until the demo is interrupted.
func (d *demo) sleep(dur time.Duration) error {
	select {
	case <-d.ctx.Done():
		return d.ctx.Err()
	case <-time.After(dur):
		return nil
	}
}
