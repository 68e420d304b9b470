// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"fmt"
	"net"
	"strconv"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// AgentImage is the hpmount binary packed as the Dockerfile places it
// (/usr/local/bin/hpmount, entrypoint hpmount, command agent), under the
// name the rendered DaemonSet gives, so its own imagePullPolicy
// (IfNotPresent) finds it. It lacks the Dockerfile's util-linux, which
// only `hpmount diag` runs (findmnt).
func AgentImage(name string, binary []byte) Image {
	return Image{Name: name, Entrypoint: []string{"/usr/local/bin/hpmount"}, Cmd: []string{"agent"},
		Files: []File{
			{Path: "usr/", Dir: true, Mode: 0o755},
			{Path: "usr/local/", Dir: true, Mode: 0o755},
			{Path: "usr/local/bin/", Dir: true, Mode: 0o755},
			{Path: "usr/local/bin/hpmount", Data: binary, Mode: 0o755},
			{Path: "tmp/", Dir: true, Mode: 0o1777},
		}}
}

// AgentSite is what the deployed agent's pod must be pointed at on this
// node instead of a real node's defaults.
type AgentSite struct {
	Node        string
	KubeletRoot string
	// KubeletPID is a process in the node's mount namespace: the test's
	// private one, not pid 1's.
	KubeletPID int
	// APIServer is host:port of the API server (loopback).
	APIServer string
	// HealthAddr and MetricsAddr are host:port on the node IP.
	HealthAddr, MetricsAddr string
}

// Override is one change the test makes to the pod the DaemonSet's
// template describes, and why the real node needs it.
type Override struct {
	What, Why string
	apply     func(*corev1.Pod, *corev1.Container)
}

// AgentOverrides are every difference between the agent pod on this node
// and the pod the DaemonSet controller would make from deploy/: the
// controller's own part first (no kube-controller-manager runs), then the
// deviations this node needs. AgentPod applies exactly these.
func AgentOverrides(s AgentSite) []Override {
	host, port, _ := net.SplitHostPort(s.APIServer)
	return []Override{
		{"spec.nodeName=" + s.Node,
			"no kube-controller-manager or scheduler runs, so no DaemonSet controller makes the pod and binds it: the test creates it from the template (with the controller's ownerReference and generateName) on the node",
			func(p *corev1.Pod, _ *corev1.Container) { p.Spec.NodeName = s.Node }},
		{"hostNetwork: true",
			"the API server listens on 127.0.0.1 only and no kube-proxy routes the kubernetes Service; on the host network the pod reaches the API server, and the test reaches /readyz and /metrics, as the kubelet's probes do",
			func(p *corev1.Pod, _ *corev1.Container) { p.Spec.HostNetwork = true }},
		{"env KUBERNETES_SERVICE_HOST=" + host + ", KUBERNETES_SERVICE_PORT=" + port,
			"the kubelet's service env names the kubernetes Service's ClusterIP, which nothing routes without kube-proxy; in-cluster config reads these two",
			func(_ *corev1.Pod, c *corev1.Container) {
				c.Env = append(c.Env, corev1.EnvVar{Name: "KUBERNETES_SERVICE_HOST", Value: host},
					corev1.EnvVar{Name: "KUBERNETES_SERVICE_PORT", Value: port})
			}},
		{"--kubelet-root=" + s.KubeletRoot + " and the kubelet hostPath (path and mountPath) " + s.KubeletRoot,
			"the node's kubelet runs with --root-dir there, not /var/lib/kubelet",
			func(p *corev1.Pod, c *corev1.Container) { moveKubeletRoot(p, c, s.KubeletRoot) }},
		{"--host-pid=" + strconv.Itoa(s.KubeletPID) + " (the kubelet)",
			"the node lives in the test's private mount namespace; pid 1's (the default) is the machine's, which the node's mounts never reach",
			func(_ *corev1.Pod, c *corev1.Container) {
				c.Args = append(c.Args, "--host-pid="+strconv.Itoa(s.KubeletPID))
			}},
		{"--health-address=" + s.HealthAddr + ", --metrics-address=" + s.MetricsAddr + " and the health and metrics containerPorts",
			"on the host network :8081 and :9090 would take ports on every interface of the machine, which other tests and services use",
			func(_ *corev1.Pod, c *corev1.Container) { moveListeners(c, s.HealthAddr, s.MetricsAddr) }},
	}
}

// AgentPod is the pod the DaemonSet controller would make from ds on the
// node, with AgentOverrides applied.
func AgentPod(ds *appsv1.DaemonSet, overrides []Override) (*corev1.Pod, error) {
	tmpl := ds.Spec.Template.DeepCopy()
	yes := true
	pod := &corev1.Pod{ObjectMeta: tmpl.ObjectMeta, Spec: tmpl.Spec}
	pod.Namespace, pod.GenerateName = ds.Namespace, ds.Name+"-"
	pod.OwnerReferences = []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "DaemonSet",
		Name: ds.Name, UID: ds.UID, Controller: &yes, BlockOwnerDeletion: &yes}}
	if len(pod.Spec.Containers) != 1 {
		return nil, fmt.Errorf("daemonset %s/%s: %d containers, want the agent's one", ds.Namespace, ds.Name, len(pod.Spec.Containers))
	}
	for _, o := range overrides {
		o.apply(pod, &pod.Spec.Containers[0])
	}
	return pod, nil
}

func moveKubeletRoot(p *corev1.Pod, c *corev1.Container, root string) {
	const shipped = "/var/lib/kubelet"
	for i, a := range c.Args {
		if strings.HasPrefix(a, "--kubelet-root=") {
			c.Args[i] = "--kubelet-root=" + root
		}
	}
	for i := range p.Spec.Volumes {
		if hp := p.Spec.Volumes[i].HostPath; hp != nil && hp.Path == shipped {
			hp.Path = root
		}
	}
	for i := range c.VolumeMounts {
		if c.VolumeMounts[i].MountPath == shipped {
			c.VolumeMounts[i].MountPath = root
		}
	}
}

func moveListeners(c *corev1.Container, health, metrics string) {
	for i, a := range c.Args {
		switch {
		case strings.HasPrefix(a, "--health-address="):
			c.Args[i] = "--health-address=" + health
		case strings.HasPrefix(a, "--metrics-address="):
			c.Args[i] = "--metrics-address=" + metrics
		}
	}
	for i := range c.Ports {
		addr := map[string]string{"health": health, "metrics": metrics}[c.Ports[i].Name]
		if _, port, err := net.SplitHostPort(addr); err == nil {
			n, _ := strconv.Atoi(port)
			c.Ports[i].ContainerPort = int32(n)
		}
	}
}
