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
func (n *Node) DeployAgent(ctx context.Context, binary string) (*DeployedAgent, error) {
	ds, err := n.applyDeploy(ctx)
	if err != nil {
		return nil, err
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
	if a.Pod, err = WaitReady(ctx, n.Kube, a.Pod.Namespace, a.Pod.Name); err != nil {
		return a, fmt.Errorf("%w\nagent log:\n%s", err, a.Log(ctx))
	}
	return a, nil
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
func (a *DeployedAgent) Log(ctx context.Context) string {
	req := a.node.Kube.CoreV1().Pods(a.Pod.Namespace).GetLogs(a.Pod.Name, &corev1.PodLogOptions{})
	out, err := req.DoRaw(ctx)
	if err != nil {
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
