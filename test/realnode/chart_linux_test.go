// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/restmapper"
	"sigs.k8s.io/yaml"

	"github.com/hpmount/hpmount/test/cluster"
	"github.com/hpmount/hpmount/test/harness"
	"github.com/hpmount/hpmount/test/manifests"
	"github.com/hpmount/hpmount/test/release"
	"github.com/hpmount/hpmount/test/simnode"
)

// chartNamespace and chartRelease are the README's install command's.
const chartNamespace, chartRelease = "hpmount-system", "hpmount"

// TestChartUpgradeUninstall is the README's "Upgrade" and "Uninstall" on
// the real node, with helm's own install, upgrade and uninstall (its Go
// packages, as the helm command runs them) and the chart from the
// release's chart repository (release.ChartRepo, as make release writes
// it), while a VM's hotplugged volume is in use:
//
//   - install the first build; the VM's volume is mounted and written;
//   - upgrade to a second build (its chart and image); the DaemonSet's
//     rollout replaces the agent pod, the new agent adopts the mount as it
//     is, and the volume stays readable throughout;
//   - uninstall; the agent pod goes, the volume stays mounted and in use,
//     and nothing of the release is left in the cluster but the namespace;
//   - the VM stops: its launcher pod cannot finish deleting while the bind
//     is there, and installing the agent again lets it go.
//
// No controller runs on this node: the test does the DaemonSet
// controller's part (RunDaemonSet) and the garbage collector's (deleting
// the agent pod of a deleted DaemonSet).
func TestChartUpgradeUninstall(t *testing.T) {
	e := sharedEnv(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	stopHostAgent()
	h := newHelmRun(t, e)
	first, second := h.build(t, ""), h.build(t, "-next")

	h.prepare(t, ctx)
	h.install(t, first)
	a := h.runAgent(t, ctx, first)
	v := e.newVM(t, ctx, "chart", "vm8")
	fs := v.addVolume(t, ctx, "fs", "ext4", 64*mib)
	pod := v.attach(t, ctx, []simnode.Volume{fs}, []simnode.Volume{fs})
	v.importDiskImage(t, ctx, pod, fs)
	v.apply(t, ctx)
	v.waitReadWrite(t, ctx, fs, "installed")

	h.upgrade(t, second)
	if err := a.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if got := v.read(t, ctx, fs, len("installed")); got != "installed" {
		t.Errorf("between the agent pods the launcher reads %q, want %q", got, "installed")
	}
	a = h.runAgent(t, ctx, second)
	h.checkAdopted(t, ctx, a)
	v.waitReadWrite(t, ctx, fs, "upgraded")

	h.uninstall(t)
	if err := a.Stop(ctx); err != nil { // the garbage collector's part
		t.Fatal(err)
	}
	if got := v.read(t, ctx, fs, len("upgraded")); got != "upgraded" {
		t.Errorf("after the uninstall the launcher reads %q, want %q", got, "upgraded")
	}
	onNode := filepath.Join(e.node.KubeletRoot, "pods", string(v.launcher.UID), "volumes", "kubernetes.io~empty-dir", "hotplug-disks", fs.Name+".img")
	t.Logf("after the uninstall, the node's mount of the VM's volume: %s", findmnt(t, onNode))
	h.checkLeft(t, ctx)

	// What that bind means once the VM stops with no agent on its node:
	// the kubelet cannot remove a directory with a mount in it, so the
	// launcher pod cannot finish deleting, until an agent runs again and
	// sweeps the terminated launcher.
	h.stopVM(t, ctx, v)
	h.install(t, first)
	h.runAgent(t, ctx, first)
	h.waitPodGone(t, ctx, v)
	h.uninstall(t)
}

// stopVM deletes the VM's launcher pod, as virt-controller does when a VM
// stops, and waits for the kubelet's failure to tear down its
// hotplug-disks: the pod stays, terminated.
func (h *helmRun) stopVM(t *testing.T, ctx context.Context, v *vm) {
	t.Helper()
	pods := h.e.kube.CoreV1().Pods(v.ns)
	if err := pods.Delete(ctx, v.launcher.Name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	uid := string(v.launcher.UID)
	err := harness.Eventually(ctx, "the kubelet's teardown of the launcher", time.Minute, func() error {
		for _, l := range strings.Split(h.e.node.Logs(400), "\n") {
			if strings.Contains(l, uid) && strings.Contains(l, "hotplug-disks") && strings.Contains(l, "device or resource busy") {
				t.Logf("the kubelet: %s", strings.TrimSpace(l))
				return nil
			}
		}
		return fmt.Errorf("no teardown failure of pod %s logged yet", uid)
	})
	if err != nil {
		t.Fatal(err)
	}
	p, err := pods.Get(ctx, v.launcher.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the launcher pod, want it left terminating: %v", err)
	}
	t.Logf("with no agent on the node, the stopped VM's launcher pod %s stays: deleted at %s, phase %s", p.Name, p.DeletionTimestamp, p.Status.Phase)
}

// waitPodGone waits until the launcher pod is gone: the agent swept its
// bind and the kubelet could remove it.
func (h *helmRun) waitPodGone(t *testing.T, ctx context.Context, v *vm) {
	t.Helper()
	began := time.Now()
	err := harness.Eventually(ctx, "the launcher pod's removal", 2*time.Minute, func() error {
		_, err := h.e.kube.CoreV1().Pods(v.ns).Get(ctx, v.launcher.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("pod %s still there: %v", v.launcher.Name, err)
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("with the agent installed again, the launcher pod was removed %v after the agent was Ready", time.Since(began).Round(time.Millisecond))
}

// helmRun is one release's life on the node.
type helmRun struct {
	e   *env
	cfg *action.Configuration
	dir string
}

// chartBuild is one build: the agent binary, its version, and the chart
// archive of its chart repository.
type chartBuild struct {
	version, binary, chart string
}

func newHelmRun(t *testing.T, e *env) *helmRun {
	t.Helper()
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "admin.kubeconfig")
	if err := cluster.WriteKubeconfig(kubeconfig, e.admin); err != nil {
		t.Fatal(err)
	}
	flags := genericclioptions.NewConfigFlags(false)
	ns := chartNamespace
	flags.KubeConfig, flags.Namespace = &kubeconfig, &ns
	cfg := new(action.Configuration)
	if err := cfg.Init(flags, chartNamespace, "secret", func(format string, v ...any) { t.Logf("helm: "+format, v...) }); err != nil {
		t.Fatal(err)
	}
	return &helmRun{e: e, cfg: cfg, dir: dir}
}

// build makes a build of the deployed version with suffix: the chart's
// repository, as make release writes it for that version (the chart's
// image.tag then names it too), and the agent binary with that version.
func (h *helmRun) build(t *testing.T, suffix string) chartBuild {
	t.Helper()
	deployDir, err := manifests.DeployDir()
	if err != nil {
		t.Fatal(err)
	}
	tag := chartImageTag(t, deployDir)
	b := chartBuild{version: tag + suffix}
	src := filepath.Join(h.dir, "deploy"+suffix)
	if err := os.CopyFS(filepath.Join(src, manifests.ChartDir), os.DirFS(filepath.Join(deployDir, manifests.ChartDir))); err != nil {
		t.Fatal(err)
	}
	values := filepath.Join(src, manifests.ChartDir, "values.yaml")
	data, err := os.ReadFile(values)
	if err != nil {
		t.Fatal(err)
	}
	data = regexp.MustCompile(`(?m)^(  tag: )`+regexp.QuoteMeta(tag)+`$`).ReplaceAll(data, []byte("${1}"+b.version))
	if err := os.WriteFile(values, data, 0o644); err != nil {
		t.Fatal(err)
	}
	if b.chart, err = release.ChartRepo(src, filepath.Join(h.dir, "repo"+suffix), b.version, time.Now()); err != nil {
		t.Fatal(err)
	}
	b.binary = filepath.Join(h.dir, "hpmount"+suffix)
	cmd := exec.Command("go", "build", "-ldflags", "-X main.version="+b.version, "-o", b.binary, "github.com/hpmount/hpmount/cmd/hpmount")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", b.version, err, out)
	}
	return b
}

// chartImageTag is the image tag the chart deploys by default.
func chartImageTag(t *testing.T, deployDir string) string {
	t.Helper()
	var values struct {
		Image struct{ Tag string } `json:"image"`
	}
	data, err := os.ReadFile(filepath.Join(deployDir, manifests.ChartDir, "values.yaml"))
	if err == nil {
		err = yaml.Unmarshal(data, &values)
	}
	if err != nil || values.Image.Tag == "" {
		t.Fatalf("the chart's image.tag: %q, %v", values.Image.Tag, err)
	}
	return values.Image.Tag
}

// prepare readies the cluster as the README's install does: the
// namespace, with its Pod Security labels, from deploy/namespace.yaml.
// What deploy/'s kustomize render made for the package's other tests is
// deleted first, as `kubectl delete -k deploy/` would but for the
// namespace: the chart's objects have the same names, and helm refuses
// to take over objects that another tool made.
func (h *helmRun) prepare(t *testing.T, ctx context.Context) {
	t.Helper()
	dir, err := manifests.DeployDir()
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := manifests.Render(dir)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := discovery.NewDiscoveryClientForConfig(h.e.admin)
	if err != nil {
		t.Fatal(err)
	}
	groups, err := restmapper.GetAPIGroupResources(dc)
	if err != nil {
		t.Fatal(err)
	}
	mapper := restmapper.NewDiscoveryRESTMapper(groups)
	dyn, err := dynamic.NewForConfig(h.e.admin)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := cluster.DecodeManifests(rendered)
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		if o.GetKind() == "Namespace" {
			continue
		}
		gvk := o.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			t.Fatal(err)
		}
		err = dyn.Resource(m.Resource).Namespace(o.GetNamespace()).Delete(ctx, o.GetName(), metav1.DeleteOptions{})
		if err != nil && !apierrors.IsNotFound(err) {
			t.Fatalf("delete %s %s: %v", o.GetKind(), o.GetName(), err)
		}
	}
	ns, err := os.ReadFile(filepath.Join(dir, "namespace.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cluster.ApplyManifests(ctx, h.e.admin, ns, false); err != nil {
		t.Fatal(err)
	}
}

func (h *helmRun) install(t *testing.T, b chartBuild) {
	t.Helper()
	c, err := loader.Load(b.chart)
	if err != nil {
		t.Fatal(err)
	}
	in := action.NewInstall(h.cfg)
	in.ReleaseName, in.Namespace = chartRelease, chartNamespace
	rel, err := in.Run(c, nil)
	if err != nil {
		t.Fatalf("helm install %s: %v", filepath.Base(b.chart), err)
	}
	t.Logf("helm install %s %s --namespace %s: revision %d, %s", chartRelease, filepath.Base(b.chart), chartNamespace, rel.Version, rel.Info.Status)
}

func (h *helmRun) upgrade(t *testing.T, b chartBuild) {
	t.Helper()
	c, err := loader.Load(b.chart)
	if err != nil {
		t.Fatal(err)
	}
	up := action.NewUpgrade(h.cfg)
	up.Namespace = chartNamespace
	rel, err := up.Run(chartRelease, c, nil)
	if err != nil {
		t.Fatalf("helm upgrade %s: %v", filepath.Base(b.chart), err)
	}
	t.Logf("helm upgrade %s %s --namespace %s: revision %d, %s", chartRelease, filepath.Base(b.chart), chartNamespace, rel.Version, rel.Info.Status)
}

func (h *helmRun) uninstall(t *testing.T) {
	t.Helper()
	res, err := action.NewUninstall(h.cfg).Run(chartRelease)
	if err != nil {
		t.Fatalf("helm uninstall: %v", err)
	}
	t.Logf("helm uninstall %s --namespace %s: %s", chartRelease, chartNamespace, strings.TrimSpace(res.Info))
}

// runAgent does the rollout's part on this node: the pod of the
// DaemonSet the release holds now, with b's binary as its image.
func (h *helmRun) runAgent(t *testing.T, ctx context.Context, b chartBuild) *DeployedAgent {
	t.Helper()
	ds, err := h.e.kube.AppsV1().DaemonSets(chartNamespace).Get(ctx, chartRelease, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := h.e.node.RunDaemonSet(ctx, b.binary, ds)
	if a != nil {
		h.e.agentLog = a.Log
		t.Cleanup(func() { _ = a.Stop(context.Background()) })
	}
	if err != nil {
		t.Fatalf("run the agent of %s: %v", b.version, err)
	}
	metrics, err := a.Get(ctx, a.Site.MetricsAddr, "/metrics")
	if err != nil || !strings.Contains(metrics, `version="`+b.version+`"`) {
		t.Fatalf("the agent pod %s runs another build than %s: %v\n%s", a.Pod.Name, b.version, err, grepLines(metrics, "hpmount_build_info{"))
	}
	t.Logf("agent pod %s Ready, image %s: %s", a.Pod.Name, ds.Spec.Template.Spec.Containers[0].Image, grepLines(metrics, "hpmount_build_info{"))
	return a
}

// checkAdopted checks that the new agent found the volume's bind right
// and left it as it was: the volume counted mounted, and no attach made
// anything (a right bind plans no call at all).
func (h *helmRun) checkAdopted(t *testing.T, ctx context.Context, a *DeployedAgent) {
	t.Helper()
	var seen string
	err := harness.Eventually(ctx, "the new agent's first pass", time.Minute, func() error {
		m, err := a.Get(ctx, a.Site.MetricsAddr, "/metrics")
		seen = grepLines(m, `hpmount_volumes{mode="Filesystem",state="mounted"}`)
		if err == nil && !strings.HasSuffix(seen, "} 1") {
			err = fmt.Errorf("the volume not counted mounted yet: %q", seen)
		}
		if err == nil {
			seen += "\n" + grepLines(m, `hpmount_mount_operations_total{op="attach"`)
		}
		return err
	})
	if err != nil || regexp.MustCompile(`op="attach",result="(mounted|replaced|created)"} [1-9]`).MatchString(seen) {
		t.Fatalf("the upgraded agent, want the bind adopted as it was: %v\n%s", err, seen)
	}
	t.Logf("the upgraded agent counts the volume mounted and made no attach: %s", grepLines(seen, "hpmount_volumes"))
}

// checkLeft lists what the uninstall left in the cluster: objects of the
// release by its instance label, cluster-wide and in its namespace.
// Only the namespace may remain: it is not the chart's.
func (h *helmRun) checkLeft(t *testing.T, ctx context.Context) {
	t.Helper()
	dyn, err := dynamic.NewForConfig(h.e.admin)
	if err != nil {
		t.Fatal(err)
	}
	sel := metav1.ListOptions{LabelSelector: "app.kubernetes.io/instance=" + chartRelease}
	var left []string
	for _, r := range []schema.GroupVersionResource{
		{Group: "apps", Version: "v1", Resource: "daemonsets"},
		{Version: "v1", Resource: "serviceaccounts"},
		{Version: "v1", Resource: "pods"},
		{Version: "v1", Resource: "secrets"},
		{Version: "v1", Resource: "configmaps"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterroles"},
		{Group: "rbac.authorization.k8s.io", Version: "v1", Resource: "clusterrolebindings"},
	} {
		list, err := dyn.Resource(r).List(ctx, sel)
		if err != nil {
			t.Fatalf("list %s: %v", r.Resource, err)
		}
		for _, o := range list.Items {
			left = append(left, fmt.Sprintf("%s %s/%s", r.Resource, o.GetNamespace(), o.GetName()))
		}
	}
	if pods, err := h.e.kube.CoreV1().Pods(chartNamespace).List(ctx, metav1.ListOptions{}); err == nil {
		for _, p := range pods.Items {
			left = append(left, "pods "+chartNamespace+"/"+p.Name)
		}
	}
	slices.Sort(left)
	left = slices.Compact(left)
	if len(left) > 0 {
		t.Errorf("the uninstall left %q", left)
	}
	if _, err := h.e.kube.CoreV1().Namespaces().Get(ctx, chartNamespace, metav1.GetOptions{}); err != nil {
		t.Errorf("the namespace %s: %v", chartNamespace, err)
	}
	t.Logf("after the uninstall the cluster holds nothing of the release but namespace %s", chartNamespace)
}

// findmnt lists the mounts on path in the node's mount namespace, the
// test's own.
func findmnt(t *testing.T, path string) string {
	t.Helper()
	out, err := exec.Command("findmnt", "-n", "-o", "TARGET,SOURCE,FSTYPE", path).CombinedOutput()
	if err != nil {
		t.Errorf("findmnt %s: %v\n%s", path, err, out)
	}
	return strings.TrimSpace(string(out))
}

// grepLines is the lines of text that contain s.
func grepLines(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
