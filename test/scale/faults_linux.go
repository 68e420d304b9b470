// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hpmount/hpmount/internal/sandbox"
	"github.com/hpmount/hpmount/test/cluster"
	"github.com/hpmount/hpmount/test/harness"
	"github.com/hpmount/hpmount/test/simnode"
)

// floodClaims is how many claims that do not exist the flooding VMI
// names: the largest round number whose VMI etcd stores (1.5 MiB a
// request, at about 400 bytes a volume).
const floodClaims = 3000

// faultAttaches is how many attaches the faults rows measure.
const faultAttaches = 10

// measureFaults (#37) puts the loaded node's agent beside three faulty
// VMIs at once and measures what their neighbours pay: one whose storage
// stops answering (a volume hung once mounted, with growth due, and one
// hung before its attach), one naming floodClaims claims that do not
// exist through its own attachment pod, and one whose launcher holds a
// dead entry (its xfs shut down), on the node's padded mount table. The
// rows sit next to the healthy node's attach row. The faulty VMIs are
// removed afterwards, so that the later steps measure a healthy node.
func (e *env) measureFaults() error {
	cfg, err := clientcmd.BuildConfigFromFlags("", e.agentKC)
	if err != nil {
		return err
	}
	p, err := harness.StartCountingProxy(cfg, "persistentvolumeclaims")
	if err != nil {
		return err
	}
	defer p.Close()
	kc := filepath.Join(e.dir, "faults.kubeconfig")
	if err := cluster.WriteKubeconfig(kc, p.Config(cfg)); err != nil {
		return err
	}
	a, err := e.startAgentWith(kc, e.opts.idle)
	if err != nil {
		return err
	}
	defer a.stop()
	if _, err := e.waitMounted(a, e.total()); err != nil {
		return err
	}
	f := &faults{e: e}
	defer f.remove()
	if err := f.add(e.ctx); err != nil {
		return err
	}
	if err := waitFor(func() bool { m, err := a.scrape(); return err == nil && m.sum("hpmount_stuck_threads", nil) >= 1 }); err != nil {
		return fmt.Errorf("the hung attach was never given up: %w", err)
	}
	m0, err := a.scrape()
	if err != nil {
		return err
	}
	c0 := p.Count()
	runs, err := e.attachRuns(faultAttaches)
	if err != nil {
		return err
	}
	m1, err := a.scrape()
	if err != nil {
		return err
	}
	return e.faultRows(runs, m0, m1, c0, p.Count())
}

// faultRows reports the faults step.
func (e *env) faultRows(runs []float64, m0, m1 metrics, c0, c1 harness.ProxyCount) error {
	passes := m1.hist("hpmount_reconcile_duration_seconds").count - m0.hist("hpmount_reconcile_duration_seconds").count
	requests := 0
	for kind, n := range c1.Requests {
		requests += n - c0.Requests[kind]
	}
	e.report.add(row{what: "one attach beside a hung volume, a claim flood and a dead entry, API update to target mounted", unit: "ms",
		runs: scale(runs, 1000), target: 250, targetOn: "p99", note: fmt.Sprintf("%d attaches, each removed again", len(runs))})
	e.report.add(row{what: fmt.Sprintf("claim requests per reconcile beside a VMI naming %d claims that do not exist", floodClaims),
		unit: "requests", runs: []float64{float64(requests) / float64(max(passes, 1))},
		note: fmt.Sprintf("%d requests in %d reconciles, during the attaches above", requests, passes)})
	e.report.add(row{what: "threads held by calls given up on, beside the faults", unit: "threads",
		runs: []float64{m1.sum("hpmount_stuck_threads", nil)}, note: "hpmount_stuck_threads after the attaches above"})
	e.report.explain("faults", "The fault rows run the loaded node's agent again, through a proxy that counts its claim requests, beside three "+
		"more VMIs: one whose FUSE storage stops answering (a volume hung once mounted, with growth due, and one hung before its "+
		"attach), one naming "+strconv.Itoa(floodClaims)+" claims that do not exist through its own attachment pod (5,000 do not fit "+
		"in one VMI: etcd refuses a request over 1.5 MiB), and one whose launcher holds a bind of an xfs that was shut down.")
	fmt.Printf("   faults: %d claim requests in %d reconciles, %.0f threads held\n", requests, passes, m1.sum("hpmount_stuck_threads", nil))
	return nil
}

// faults are the faulty VMIs of measureFaults.
type faults struct {
	e     *env
	names []string // VMIs
	pods  []string // their launchers and attachment pods
	fuse  []*sandbox.HangingFS
}

func (f *faults) add(ctx context.Context) error {
	for _, add := range []func(context.Context) error{f.hung, f.flood, f.dead} {
		if err := add(ctx); err != nil {
			return err
		}
	}
	return nil
}

// vmi makes a faulty VMI's shell, launcher and attachment pod for vols.
func (f *faults) vmi(ctx context.Context, name string, vols []simnode.Volume) (*vm, error) {
	e := f.e
	v := &vm{name: name, vols: vols}
	shell, err := e.ctrl.CreateVMIShell(ctx, vmNS, name, nodeName)
	if err != nil {
		return nil, fmt.Errorf("create vmi %s: %w", name, err)
	}
	f.names = append(f.names, name)
	v.uid = shell.GetUID()
	launcher, err := e.ctrl.CreateLauncherPod(ctx, vmNS, name, v.uid, nodeName)
	if err != nil {
		return nil, err
	}
	v.launcher = launcher.UID
	f.pods = append(f.pods, launcher.Name)
	e.mountMu.Lock()
	v.l, err = e.node.StartLauncher(string(v.launcher))
	e.mountMu.Unlock()
	if err != nil {
		return nil, err
	}
	attach, err := e.ctrl.CreateAttachmentPod(ctx, launcher, vols)
	if err != nil {
		return nil, err
	}
	v.attach = attach.UID
	f.pods = append(f.pods, attach.Name)
	return v, nil
}

// hung is a VMI with two volumes on FUSE servers that stop answering: one
// once it is mounted, its claim then grown, one before its attach.
func (f *faults) hung(ctx context.Context) error {
	vols := []simnode.Volume{
		{Name: "later", Claim: "claim-hung-later", PV: "pv-hung-later", Capacity: "64Mi"},
		{Name: "early", Claim: "claim-hung-early", PV: "pv-hung-early", Capacity: "64Mi"},
	}
	v, err := f.vmi(ctx, "faulty-hung", vols)
	if err != nil {
		return err
	}
	var fss []*sandbox.HangingFS
	for _, vol := range vols {
		if err := f.e.ctrl.CreatePVC(ctx, vmNS, vol); err != nil {
			return err
		}
		fs, err := f.e.node.PublishHanging(string(v.attach), vol.PV)
		if err != nil {
			return err
		}
		f.fuse = append(f.fuse, fs)
		fss = append(fss, fs)
		// Served once: a connection whose FUSE_INIT is never answered
		// blocks every request, the end of the test's too.
		if _, err := os.Stat(filepath.Join(f.e.node.CSIMountDir(string(v.attach), vol.PV), "disk.img")); err != nil {
			return err
		}
	}
	fss[1].Hang()
	if _, err := f.e.ctrl.ApplyVMI(ctx, v.spec()); err != nil {
		return err
	}
	if err := waitFor(func() bool { return isMountPoint(f.e.target(v, vols[0])) }); err != nil {
		return fmt.Errorf("attach of the volume that hangs later: %w", err)
	}
	fss[0].Hang()
	v.vols[0].Capacity = "128Mi" // growth due on storage that does not answer
	_, err = f.e.ctrl.ApplyVMI(ctx, v.spec())
	return err
}

// flood is a VMI naming floodClaims claims that do not exist.
func (f *faults) flood(ctx context.Context) error {
	vols := make([]simnode.Volume, floodClaims)
	for i := range vols {
		n := "f" + strconv.Itoa(i)
		vols[i] = simnode.Volume{Name: n, Claim: "c" + strconv.Itoa(i), PV: "pv-flood-" + n, Capacity: "1Mi"}
	}
	v, err := f.vmi(ctx, "faulty-flood", vols)
	if err != nil {
		return err
	}
	_, err = f.e.ctrl.ApplyVMI(ctx, v.spec())
	return err
}

// dead is a VMI whose volume's xfs is shut down once it is mounted.
func (f *faults) dead(ctx context.Context) error {
	vol := simnode.Volume{Name: "dead", Claim: "claim-faulty-dead", PV: "pv-faulty-dead", Capacity: "300Mi"}
	v, err := f.vmi(ctx, "faulty-dead", []simnode.Volume{vol})
	if err != nil {
		return err
	}
	d, err := f.e.node.NewDisk("faulty-dead", "xfs", 300<<20)
	if err != nil {
		return err
	}
	if err := f.e.ctrl.CreatePVC(ctx, vmNS, vol); err != nil {
		return err
	}
	if err := f.e.node.PublishFilesystem(string(v.attach), vol.PV, d, 32<<20); err != nil {
		return err
	}
	if _, err := f.e.ctrl.ApplyVMI(ctx, v.spec()); err != nil {
		return err
	}
	if err := waitFor(func() bool { return isMountPoint(f.e.target(v, vol)) }); err != nil {
		return fmt.Errorf("attach of the volume to shut down: %w", err)
	}
	_, err = runCmd("xfs_io", "-x", "-c", "shutdown", f.e.node.CSIMountDir(string(v.attach), vol.PV))
	return err
}

// remove ends the FUSE servers and deletes the faulty VMIs and their pods:
// the agent's sweep then empties their launchers' directories.
func (f *faults) remove() {
	for _, fs := range f.fuse {
		fs.Abort()
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	for _, name := range f.names {
		if err := f.e.ctrl.DeleteVMI(ctx, vmNS, name); err != nil {
			fmt.Printf("   delete vmi %s: %v\n", name, err)
		}
	}
	for _, name := range f.pods {
		if err := f.e.kube.CoreV1().Pods(vmNS).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			fmt.Printf("   delete pod %s: %v\n", name, err)
		}
	}
}
