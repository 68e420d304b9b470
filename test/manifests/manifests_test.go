// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package manifests

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/intstr"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"
)

const (
	namespace  = "hpmount-system"
	name       = "hpmount"
	image      = "ghcr.io/hpmount/hpmount"
	kubeletDir = "/var/lib/kubelet"
)

// rendered is a kustomize build split into typed objects. Typed objects are
// decoded strictly, so a misspelt field fails the test instead of being
// dropped silently by the apiserver.
type rendered struct {
	raw          []byte
	namespaces   []corev1.Namespace
	accounts     []corev1.ServiceAccount
	roles        []rbacv1.ClusterRole
	bindings     []rbacv1.ClusterRoleBinding
	daemonSets   []appsv1.DaemonSet
	unstructured []*unstructured.Unstructured // every object, including the above
}

func deployPath(t *testing.T, elem ...string) string {
	t.Helper()
	dir, err := DeployDir()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(append([]string{dir}, elem...)...)
}

func render(t *testing.T, dir string) *rendered {
	t.Helper()
	out, err := Render(dir)
	if err != nil {
		t.Fatal(err)
	}
	r, err := split(out)
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	return r
}

func split(data []byte) (*rendered, error) {
	r := &rendered{raw: data}
	reader := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	for i := 0; ; i++ {
		doc, err := reader.Read()
		if errors.Is(err, io.EOF) {
			return r, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(bytes.TrimSpace(doc)) == 0 {
			continue
		}
		u := &unstructured.Unstructured{}
		if err := yaml.Unmarshal(doc, &u.Object); err != nil {
			return nil, fmt.Errorf("document %d: %w", i, err)
		}
		if len(u.Object) == 0 {
			continue
		}
		r.unstructured = append(r.unstructured, u)
		var typed any
		switch u.GetKind() {
		case "Namespace":
			r.namespaces = append(r.namespaces, corev1.Namespace{})
			typed = &r.namespaces[len(r.namespaces)-1]
		case "ServiceAccount":
			r.accounts = append(r.accounts, corev1.ServiceAccount{})
			typed = &r.accounts[len(r.accounts)-1]
		case "ClusterRole":
			r.roles = append(r.roles, rbacv1.ClusterRole{})
			typed = &r.roles[len(r.roles)-1]
		case "ClusterRoleBinding":
			r.bindings = append(r.bindings, rbacv1.ClusterRoleBinding{})
			typed = &r.bindings[len(r.bindings)-1]
		case "DaemonSet":
			r.daemonSets = append(r.daemonSets, appsv1.DaemonSet{})
			typed = &r.daemonSets[len(r.daemonSets)-1]
		default:
			continue
		}
		if err := yaml.UnmarshalStrict(doc, typed); err != nil {
			return nil, fmt.Errorf("document %d (%s %q): %w", i, u.GetKind(), u.GetName(), err)
		}
	}
}

func (r *rendered) kinds() []string {
	var k []string
	for _, u := range r.unstructured {
		k = append(k, u.GetKind()+"/"+u.GetName())
	}
	slices.Sort(k)
	return k
}

func TestBaseObjects(t *testing.T) {
	r := render(t, deployPath(t))
	want := []string{
		"ClusterRole/hpmount", "ClusterRoleBinding/hpmount", "DaemonSet/hpmount",
		"Namespace/hpmount-system", "ServiceAccount/hpmount",
	}
	if got := r.kinds(); !slices.Equal(got, want) {
		t.Fatalf("base renders %v, want %v", got, want)
	}
	for _, u := range r.unstructured {
		switch u.GetKind() {
		case "Namespace", "ClusterRole", "ClusterRoleBinding":
		default:
			if u.GetNamespace() != namespace {
				t.Errorf("%s %q is in namespace %q, want %q", u.GetKind(), u.GetName(), u.GetNamespace(), namespace)
			}
		}
	}
	if bytes.Contains(r.raw, []byte("Bidirectional")) {
		t.Error("a mount uses Bidirectional propagation; mounts are made in the host namespace instead")
	}
	ns := r.namespaces[0]
	if got := ns.Labels["pod-security.kubernetes.io/enforce"]; got != "privileged" {
		t.Errorf("namespace Pod Security enforce label %q, want privileged (the agent pod is privileged)", got)
	}

	// The DaemonSet runs as the account the binding grants the role to.
	ds, sa, crb := r.daemonSets[0], r.accounts[0], r.bindings[0]
	if ds.Spec.Template.Spec.ServiceAccountName != sa.Name {
		t.Errorf("DaemonSet runs as %q, the ServiceAccount is %q", ds.Spec.Template.Spec.ServiceAccountName, sa.Name)
	}
	if crb.RoleRef.Kind != "ClusterRole" || crb.RoleRef.Name != r.roles[0].Name {
		t.Errorf("binding refers to %s %q, want ClusterRole %q", crb.RoleRef.Kind, crb.RoleRef.Name, r.roles[0].Name)
	}
	if !slices.ContainsFunc(crb.Subjects, func(s rbacv1.Subject) bool {
		return s.Kind == "ServiceAccount" && s.Name == sa.Name && s.Namespace == sa.Namespace
	}) {
		t.Errorf("binding subjects %+v lack ServiceAccount %s/%s", crb.Subjects, sa.Namespace, sa.Name)
	}
}

// flagValue returns the value of --name=value in args.
func flagValue(args []string, name string) (string, bool) {
	for _, a := range args {
		if v, ok := strings.CutPrefix(a, "--"+name+"="); ok {
			return v, true
		}
	}
	return "", false
}

func TestDaemonSetInvariants(t *testing.T) {
	r := render(t, deployPath(t))
	ds := r.daemonSets[0]
	pod := ds.Spec.Template.Spec
	if len(pod.Containers) != 1 {
		t.Fatalf("%d containers, want 1", len(pod.Containers))
	}
	c := pod.Containers[0]
	mounts := map[string]corev1.VolumeMount{}
	for _, m := range c.VolumeMounts {
		mounts[m.Name] = m
	}
	volumes := map[string]corev1.Volume{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = v
	}
	// hostMount finds the container mount of hostPath path.
	hostMount := func(path string) (corev1.VolumeMount, *corev1.HostPathVolumeSource, bool) {
		for _, v := range pod.Volumes {
			if v.HostPath != nil && v.HostPath.Path == path {
				m, ok := mounts[v.Name]
				return m, v.HostPath, ok
			}
		}
		return corev1.VolumeMount{}, nil, false
	}
	env := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		env[e.Name] = e
	}
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}

	checks := []struct {
		name  string
		check func() error
	}{
		{"selector matches template labels", func() error {
			for k, v := range ds.Spec.Selector.MatchLabels {
				if ds.Spec.Template.Labels[k] != v {
					return fmt.Errorf("selector %s=%s not on the pod template (labels %v)", k, v, ds.Spec.Template.Labels)
				}
			}
			return nil
		}},
		{"image", func() error {
			repo, tag, ok := strings.Cut(c.Image, ":")
			if !ok || repo != image || tag == "" || tag == "latest" {
				return fmt.Errorf("image %q, want %s:<pinned tag>", c.Image, image)
			}
			return nil
		}},
		{"args", func() error {
			want := []string{"agent", "--node-name=$(NODE_NAME)", "--kubelet-root=" + kubeletDir, "--host-proc=/host/proc",
				"--metrics-address=:9090", "--health-address=:8081"}
			if !slices.Equal(c.Args, want) {
				return fmt.Errorf("args %q, want %q", c.Args, want)
			}
			return nil
		}},
		{"privileged", func() error {
			if c.SecurityContext == nil || c.SecurityContext.Privileged == nil || !*c.SecurityContext.Privileged {
				return errors.New("container is not privileged")
			}
			return nil
		}},
		{"hostPID", func() error {
			if !pod.HostPID {
				return errors.New("hostPID is false: /host/proc/1 would not be the host's init")
			}
			return nil
		}},
		{"kubelet root HostToContainer", func() error {
			root, _ := flagValue(c.Args, "kubelet-root")
			m, _, ok := hostMount(root)
			if !ok {
				return fmt.Errorf("no hostPath %q mounted", root)
			}
			if m.MountPath != root {
				return fmt.Errorf("kubelet root mounted at %q, the flag says %q: the paths in mountinfo would not match", m.MountPath, root)
			}
			if m.MountPropagation == nil || *m.MountPropagation != corev1.MountPropagationHostToContainer {
				return fmt.Errorf("kubelet root propagation %v, want HostToContainer", m.MountPropagation)
			}
			if m.ReadOnly {
				return errors.New("kubelet root is read-only")
			}
			return nil
		}},
		{"host proc read-only", func() error {
			hostProc, _ := flagValue(c.Args, "host-proc")
			m, _, ok := hostMount("/proc")
			if !ok || m.MountPath != hostProc || !m.ReadOnly {
				return fmt.Errorf("host /proc mount %+v, want read-only at %q", m, hostProc)
			}
			return nil
		}},
		{"dev, cgroup and private run dir", func() error {
			for path, at := range map[string]string{"/dev": "/dev", "/sys/fs/cgroup": "/sys/fs/cgroup", "/run/hpmount": "/run/hpmount"} {
				m, _, ok := hostMount(path)
				if !ok || m.MountPath != at {
					return fmt.Errorf("hostPath %q mounted as %+v, want at %q", path, m, at)
				}
			}
			if _, hp, _ := hostMount("/run/hpmount"); hp.Type == nil || *hp.Type != corev1.HostPathDirectoryOrCreate {
				return errors.New("/run/hpmount is not DirectoryOrCreate")
			}
			if m, _, _ := hostMount("/run/hpmount"); m.MountPropagation != nil && *m.MountPropagation != corev1.MountPropagationNone {
				return fmt.Errorf("/run/hpmount propagation %s: the growth mounts must not reach the container", *m.MountPropagation)
			}
			return nil
		}},
		{"tolerates every taint", func() error {
			for _, tol := range pod.Tolerations {
				if tol.Operator == corev1.TolerationOpExists && tol.Key == "" && tol.Effect == "" {
					return nil
				}
			}
			return fmt.Errorf("tolerations %+v lack {operator: Exists}", pod.Tolerations)
		}},
		{"NODE_NAME from spec.nodeName", func() error {
			e := env["NODE_NAME"]
			if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
				return fmt.Errorf("NODE_NAME is %+v", e)
			}
			return nil
		}},
		{"GOMEMLIMIT from limits.memory", func() error {
			e := env["GOMEMLIMIT"]
			if e.ValueFrom == nil || e.ValueFrom.ResourceFieldRef == nil || e.ValueFrom.ResourceFieldRef.Resource != "limits.memory" {
				return fmt.Errorf("GOMEMLIMIT is %+v", e)
			}
			if d := e.ValueFrom.ResourceFieldRef.Divisor; !d.IsZero() && d.Value() != 1 {
				return fmt.Errorf("GOMEMLIMIT divisor %s: Go reads a plain number as bytes", d.String())
			}
			if _, ok := c.Resources.Limits[corev1.ResourceMemory]; !ok {
				return errors.New("no memory limit: GOMEMLIMIT would be the node's allocatable memory")
			}
			return nil
		}},
		{"resources", func() error {
			if err := memoryFitsBenchmarks(t, c.Resources); err != nil {
				return err
			}
			want := map[string]string{"cpu request": "20m", "memory request": "96Mi", "memory limit": "192Mi"}
			got := map[string]string{
				"cpu request":    c.Resources.Requests.Cpu().String(),
				"memory request": c.Resources.Requests.Memory().String(),
				"memory limit":   c.Resources.Limits.Memory().String(),
			}
			for k, v := range want {
				if got[k] != v {
					return fmt.Errorf("%s %s, want %s", k, got[k], v)
				}
			}
			if _, ok := c.Resources.Limits[corev1.ResourceCPU]; ok {
				return errors.New("cpu limit set: throttling delays mounts for no benefit")
			}
			return nil
		}},
		{"ports agree with flags", func() error {
			for flag, port := range map[string]string{"metrics-address": "metrics", "health-address": "health"} {
				addr, _ := flagValue(c.Args, flag)
				if want := fmt.Sprintf(":%d", ports[port]); addr != want {
					return fmt.Errorf("--%s=%s but port %q is %d", flag, addr, port, ports[port])
				}
			}
			return nil
		}},
		{"probes", func() error {
			for _, p := range []struct {
				what  string
				probe *corev1.Probe
				path  string
			}{{"liveness", c.LivenessProbe, "/healthz"}, {"readiness", c.ReadinessProbe, "/readyz"}} {
				if p.probe == nil || p.probe.HTTPGet == nil {
					return fmt.Errorf("no %s HTTP probe", p.what)
				}
				g := p.probe.HTTPGet
				if g.Path != p.path || g.Port != intstr.FromString("health") {
					return fmt.Errorf("%s probe %s on %s, want %s on port health", p.what, g.Path, g.Port.String(), p.path)
				}
			}
			return nil
		}},
		{"rolling update one node at a time", func() error {
			u := ds.Spec.UpdateStrategy
			if u.Type != appsv1.RollingUpdateDaemonSetStrategyType || u.RollingUpdate == nil ||
				u.RollingUpdate.MaxUnavailable == nil || *u.RollingUpdate.MaxUnavailable != intstr.FromInt32(1) {
				return fmt.Errorf("update strategy %+v, want RollingUpdate maxUnavailable 1", u)
			}
			return nil
		}},
		{"scheduling", func() error {
			switch {
			case pod.PriorityClassName != "system-node-critical":
				return fmt.Errorf("priority class %q", pod.PriorityClassName)
			case pod.NodeSelector["kubernetes.io/os"] != "linux":
				return fmt.Errorf("node selector %v", pod.NodeSelector)
			case pod.TerminationGracePeriodSeconds == nil || *pod.TerminationGracePeriodSeconds != 30:
				return fmt.Errorf("termination grace %v", pod.TerminationGracePeriodSeconds)
			case pod.ServiceAccountName != name:
				return fmt.Errorf("service account %q", pod.ServiceAccountName)
			}
			return nil
		}},
		{"every volume is mounted", func() error {
			for n := range volumes {
				if _, ok := mounts[n]; !ok {
					return fmt.Errorf("volume %q is not mounted", n)
				}
			}
			return nil
		}},
	}
	for _, tc := range checks {
		t.Run(tc.name, func(t *testing.T) {
			if err := tc.check(); err != nil {
				t.Error(err)
			}
		})
	}
}

// monitoringOverlay writes an overlay outside deploy/ that uses the base
// and the monitoring component, as deploy/README.md tells users to.
func monitoringOverlay(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	base, err := filepath.Rel(dir, deployPath(t))
	if err != nil {
		t.Fatal(err)
	}
	k := fmt.Sprintf(`apiVersion: kustomize.config.k8s.io/v1beta1
kind: Kustomization
resources: [%q]
components: [%q]
`, base, filepath.Join(base, "monitoring"))
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestMonitoringComponent(t *testing.T) {
	base := render(t, deployPath(t))
	r := render(t, monitoringOverlay(t))
	want := append(base.kinds(), "PodMonitor/hpmount")
	slices.Sort(want)
	if got := r.kinds(); !slices.Equal(got, want) {
		t.Fatalf("monitoring overlay renders %v, want %v", got, want)
	}
	var pm *unstructured.Unstructured
	for _, u := range r.unstructured {
		if u.GetKind() == "PodMonitor" {
			pm = u
		}
	}
	if pm.GetAPIVersion() != "monitoring.coreos.com/v1" || pm.GetNamespace() != namespace {
		t.Errorf("PodMonitor %s in %q", pm.GetAPIVersion(), pm.GetNamespace())
	}
	ds := r.daemonSets[0]
	sel, _, _ := unstructured.NestedStringMap(pm.Object, "spec", "selector", "matchLabels")
	if len(sel) == 0 {
		t.Fatal("PodMonitor selects no labels")
	}
	for k, v := range sel {
		if ds.Spec.Template.Labels[k] != v {
			t.Errorf("PodMonitor selects %s=%s, not a label of the agent pods %v", k, v, ds.Spec.Template.Labels)
		}
	}
	endpoints, _, _ := unstructured.NestedSlice(pm.Object, "spec", "podMetricsEndpoints")
	if len(endpoints) != 1 {
		t.Fatalf("%d podMetricsEndpoints, want 1", len(endpoints))
	}
	ep := endpoints[0].(map[string]any)
	if ep["port"] != "metrics" || ep["path"] != "/metrics" {
		t.Errorf("endpoint %v, want port metrics path /metrics", ep)
	}
	if !slices.ContainsFunc(ds.Spec.Template.Spec.Containers[0].Ports, func(p corev1.ContainerPort) bool { return p.Name == "metrics" }) {
		t.Error("the agent container has no port named metrics")
	}
}

// TestNoHarvesterOverlay holds deploy/README.md to its word: the base is
// what Harvester runs, so there is no overlay to drift from it; deploy/harvester
// holds only the example Addon installing the chart (TestHarvesterAddon).
func TestNoHarvesterOverlay(t *testing.T) {
	entries, err := os.ReadDir(deployPath(t, "harvester"))
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() != "addon.yaml" {
			t.Errorf("deploy/harvester/%s exists; deploy/README.md says the base works on Harvester unchanged and that folder holds only addon.yaml: update one or the other", e.Name())
		}
	}
	readme, err := os.ReadFile(deployPath(t, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(readme, []byte("## Harvester")) {
		t.Error("deploy/README.md lacks the Harvester section")
	}
}
