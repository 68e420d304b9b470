// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hpmount/hpmount/test/cluster"
	"github.com/hpmount/hpmount/test/harness"
	"github.com/hpmount/hpmount/test/manifests"
)

// DeployedAgent is the agent running as a pod made from the DaemonSet of
// deploy/ (AgentPod), with its ServiceAccount, RBAC and projected token.
type DeployedAgent struct {
	Pod       *corev1.Pod
	Site      AgentSite
	Overrides []Override
	node      *Node
}

// DeployAgent applies the kustomize render of deploy/ (namespace,
// ServiceAccount, RBAC and the DaemonSet, which nothing turns into pods
// here), imports binary as the DaemonSet's image, creates the agent's pod
// from the DaemonSet's template with AgentOverrides, and returns once the
// kubelet reports it Ready (its readiness probe on /readyz passed).
// A dynamically linked binary is refused before anything is made: the
// image has no libc (harness.CheckStatic). When the pod was created but
// never became Ready, the agent is returned with the error, so that the
// caller can Stop it, and the error holds the pod's status and log.
func (n *Node) DeployAgent(ctx context.Context, binary string) (*DeployedAgent, error) {
	if err := harness.CheckStatic(binary); err != nil {
		return nil, fmt.Errorf("agent binary: %w", err)
	}
	ds, err := n.applyDeploy(ctx)
	if err != nil {
		return nil, err
	}
	return n.RunDaemonSet(ctx, binary, ds)
}

// RunDaemonSet does the DaemonSet controller's part for ds on this node,
// where no controller runs, whatever installed ds (deploy/'s render, or
// helm): it imports binary as the image ds names, creates the pod from
// ds's template with AgentOverrides, and returns once the kubelet reports
// it Ready, or, with the error, once it failed to.
func (n *Node) RunDaemonSet(ctx context.Context, binary string, ds *appsv1.DaemonSet) (*DeployedAgent, error) {
	if err := harness.CheckStatic(binary); err != nil {
		return nil, fmt.Errorf("agent binary: %w", err)
	}
	data, err := os.ReadFile(binary)
	if err != nil {
		return nil, fmt.Errorf("read agent binary: %w", err)
	}
	img := AgentImage(ds.Spec.Template.Spec.Containers[0].Image, data)
	if err := importImage(ctx, n.ContainerdSocket, filepath.Join(n.Dir, "images"), img); err != nil {
		return nil, err
	}
	a := &DeployedAgent{node: n, Site: AgentSite{Node: n.Name, KubeletRoot: n.KubeletRoot,
		KubeletPID: n.KubeletPID(), APIServer: hostPort(n.cluster.Host())}}
	if a.Site.HealthAddr, err = freeNodeAddr(n.Name); err == nil {
		a.Site.MetricsAddr, err = freeNodeAddr(n.Name)
	}
	if err != nil {
		return nil, err
	}
	a.Overrides = AgentOverrides(a.Site)
	pod, err := AgentPod(ds, a.Overrides)
	if err != nil {
		return nil, err
	}
	if a.Pod, err = n.Kube.CoreV1().Pods(pod.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return nil, fmt.Errorf("create agent pod: %w", err)
	}
	if err := a.waitReady(ctx); err != nil {
		return a, err
	}
	return a, nil
}

// waitReady waits for the created pod to be Ready. a.Pod stays the pod
// that was created until the Ready one replaces it: on failure it still
// names the pod to explain and to Stop.
func (a *DeployedAgent) waitReady(ctx context.Context) error {
	ready, err := WaitReady(ctx, a.node.Kube, a.Pod.Namespace, a.Pod.Name)
	if err != nil {
		return fmt.Errorf("%w\n%s", err, a.explain(ctx))
	}
	a.Pod = ready
	return nil
}

// explain is the agent pod's status and log (and its previous container's
// log after a restart), read with a deadline of its own: the caller's
// context may be what ran out.
func (a *DeployedAgent) explain(ctx context.Context) string {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 15*time.Second)
	defer cancel()
	status := "unknown"
	if pod, err := a.node.Kube.CoreV1().Pods(a.Pod.Namespace).Get(ctx, a.Pod.Name, metav1.GetOptions{}); err != nil {
		status = fmt.Sprintf("(get pod: %v)", err)
	} else {
		status = podState(pod)
	}
	s := fmt.Sprintf("agent pod %s/%s: %s\nagent log:\n%s", a.Pod.Namespace, a.Pod.Name, status, a.log(ctx, false))
	if prev := a.log(ctx, true); prev != "" {
		s += "\nagent log before its last restart:\n" + prev
	}
	return s
}

// applyDeploy applies deploy/'s render and returns the DaemonSet as the
// API server stored it.
func (n *Node) applyDeploy(ctx context.Context) (*appsv1.DaemonSet, error) {
	dir, err := manifests.DeployDir()
	if err != nil {
		return nil, err
	}
	rendered, err := manifests.Render(dir)
	if err != nil {
		return nil, err
	}
	objs, err := cluster.ApplyManifests(ctx, n.cluster.AdminConfig(), rendered, false)
	if err != nil {
		return nil, fmt.Errorf("apply deploy/: %w", err)
	}
	for _, o := range objs {
		if o.GetKind() == "DaemonSet" {
			return n.Kube.AppsV1().DaemonSets(o.GetNamespace()).Get(ctx, o.GetName(), metav1.GetOptions{})
		}
	}
	return nil, fmt.Errorf("no DaemonSet in the render of %q", dir)
}

// Log is the agent container's log, read through the API server as
// `kubectl logs` does.
func (a *DeployedAgent) Log(ctx context.Context) string { return a.log(ctx, false) }

// log reads the current container's log, or with previous the one before
// its last restart ("" when there was none).
func (a *DeployedAgent) log(ctx context.Context, previous bool) string {
	req := a.node.Kube.CoreV1().Pods(a.Pod.Namespace).GetLogs(a.Pod.Name, &corev1.PodLogOptions{Previous: previous})
	out, err := req.DoRaw(ctx)
	switch {
	case err != nil && previous:
		return ""
	case err != nil:
		return fmt.Sprintf("(logs of %s: %v)", a.Pod.Name, err)
	}
	return string(out)
}

// Get fetches path (e.g. /readyz) from the health or metrics listener,
// which the pod serves on the node's network.
func (a *DeployedAgent) Get(ctx context.Context, addr, path string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addr+path, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %s: %s", path, resp.Status, body)
	}
	return string(body), err
}

// Stop deletes the pod, as a DaemonSet rollout or removal does (SIGTERM,
// the manifest's grace period), and waits until the kubelet removed it.
func (a *DeployedAgent) Stop(ctx context.Context) error {
	pods := a.node.Kube.CoreV1().Pods(a.Pod.Namespace)
	if err := pods.Delete(ctx, a.Pod.Name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete agent pod: %w", err)
	}
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	for {
		if _, err := pods.Get(ctx, a.Pod.Name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("agent pod %s not removed: %w", a.Pod.Name, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// hostPort is the host:port of a URL like https://127.0.0.1:6443.
func hostPort(u string) string {
	if p, err := url.Parse(u); err == nil {
		return p.Host
	}
	return u
}

// freeNodeAddr is a free port on the node IP.
func freeNodeAddr(node string) (string, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(NodeIP(node), "0"))
	if err != nil {
		return "", fmt.Errorf("find a free port on the node IP: %w", err)
	}
	defer l.Close()
	return l.Addr().String(), nil
}
