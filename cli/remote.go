// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/httpstream"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/remotecommand"
	utilexec "k8s.io/client-go/util/exec"
)

// Defaults of the plugin: what deploy/ and the chart ship.
const (
	DefaultNamespace = "hpmount-system"
	DefaultSelector  = "app.kubernetes.io/name=hpmount,app.kubernetes.io/component=node-agent"
	// DefaultEntrypoint is the image's ENTRYPOINT, which the pod spec does
	// not show when the container sets args only.
	DefaultEntrypoint = "/usr/local/bin/hpmount"
)

// nodeFlags are the agent flags diag takes with the same meaning: where the
// node's pieces are, and how to reach the API server.
var nodeFlags = map[string]bool{
	"kubelet-root": true, "host-proc": true, "host-pid": true,
	"cgroup-root": true, "cgroup-mode": true,
	"kubeconfig": true, "kube-api-qps": true, "kube-api-burst": true,
}

// FindAgentPod returns the running pod on node that selector picks in
// namespace.
func FindAgentPod(ctx context.Context, kube kubernetes.Interface, namespace, selector, node string) (*corev1.Pod, error) {
	list, err := kube.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{
		LabelSelector: selector, FieldSelector: "spec.nodeName=" + node,
	})
	if err != nil {
		return nil, fmt.Errorf("list agent pods in namespace %q: %w", namespace, err)
	}
	var seen []string
	for i := range list.Items {
		p := &list.Items[i]
		if p.Spec.NodeName != node {
			continue
		}
		if p.Status.Phase == corev1.PodRunning && p.DeletionTimestamp == nil {
			return p, nil
		}
		seen = append(seen, p.Name+" ("+string(p.Status.Phase)+")")
	}
	if len(seen) > 0 {
		return nil, fmt.Errorf("no running agent pod on node %q in namespace %q: %s", node, namespace, strings.Join(seen, ", "))
	}
	return nil, fmt.Errorf("no agent pod on node %q in namespace %q with labels %q (set -n to the agent's namespace, -l to its labels)", node, namespace, selector)
}

// AgentContainer is the container named name, or the pod's only one when
// name is empty.
func AgentContainer(pod *corev1.Pod, name string) (*corev1.Container, error) {
	for i := range pod.Spec.Containers {
		if c := &pod.Spec.Containers[i]; c.Name == name || (name == "" && len(pod.Spec.Containers) == 1) {
			return c, nil
		}
	}
	return nil, fmt.Errorf("pod %s/%s: no container %q (set -c)", pod.Namespace, pod.Name, name)
}

// DiagCommand is the command line of diag in the agent's container: its
// entrypoint, `diag --node-name=NODE`, the agent's node flags as the pod
// spec gives them ($(VAR) expanded as the kubelet does), then extra and
// the VMI names.
func DiagCommand(pod *corev1.Pod, c *corev1.Container, extra, vmis []string) ([]string, error) {
	cmd := []string{DefaultEntrypoint}
	if len(c.Command) > 0 {
		cmd = append([]string(nil), c.Command...)
	}
	cmd = append(cmd, "diag", "--node-name="+pod.Spec.NodeName)
	args := c.Args
	for i := 0; i < len(args); i++ {
		name, value, hasValue := strings.Cut(strings.TrimPrefix(args[i], "--"), "=")
		if !strings.HasPrefix(args[i], "--") || !nodeFlags[name] {
			continue
		}
		if !hasValue {
			if i+1 == len(args) {
				return nil, fmt.Errorf("agent flag %q has no value", args[i])
			}
			i++
			value = args[i]
		}
		v, err := expand(value, pod, c)
		if err != nil {
			return nil, err
		}
		cmd = append(cmd, "--"+name+"="+v)
	}
	cmd = append(cmd, extra...)
	if len(vmis) > 0 {
		cmd = append(append(cmd, "--"), vmis...)
	}
	return cmd, nil
}

var varRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expand resolves $(VAR) in an agent argument from the container's env:
// literal values and the spec.nodeName field, which is all the shipped
// manifests use. Anything else is an error rather than a wrong flag.
func expand(s string, pod *corev1.Pod, c *corev1.Container) (string, error) {
	var bad error
	out := varRef.ReplaceAllStringFunc(s, func(ref string) string {
		name := varRef.FindStringSubmatch(ref)[1]
		for _, e := range c.Env {
			switch {
			case e.Name != name:
			case e.ValueFrom == nil:
				return e.Value
			case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "spec.nodeName":
				return pod.Spec.NodeName
			}
		}
		bad = fmt.Errorf("agent argument %q: cannot resolve %s outside the pod", s, ref)
		return ref
	})
	return out, bad
}

// Exec runs cmd in the container through the API server's pods/exec, as
// kubectl exec does: WebSocket first, SPDY when the server does not
// upgrade to it. It returns the command's exit status; err is for a
// failure to run it at all.
func Exec(ctx context.Context, cfg *rest.Config, pod *corev1.Pod, container string, cmd []string, stdout, stderr io.Writer) (int, error) {
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return 0, fmt.Errorf("kubernetes client: %w", err)
	}
	u := kube.CoreV1().RESTClient().Post().Resource("pods").Namespace(pod.Namespace).Name(pod.Name).
		SubResource("exec").VersionedParams(&corev1.PodExecOptions{
		Container: container, Command: cmd, Stdout: true, Stderr: true,
	}, scheme.ParameterCodec).URL()
	ws, err := remotecommand.NewWebSocketExecutor(cfg, http.MethodGet, u.String())
	if err != nil {
		return 0, fmt.Errorf("websocket executor: %w", err)
	}
	spdy, err := remotecommand.NewSPDYExecutor(cfg, http.MethodPost, u)
	if err != nil {
		return 0, fmt.Errorf("spdy executor: %w", err)
	}
	ex, err := remotecommand.NewFallbackExecutor(ws, spdy, func(err error) bool {
		return httpstream.IsUpgradeFailure(err) || httpstream.IsHTTPSProxyError(err)
	})
	if err != nil {
		return 0, err
	}
	err = ex.StreamWithContext(ctx, remotecommand.StreamOptions{Stdout: stdout, Stderr: stderr})
	var exit utilexec.ExitError
	if errors.As(err, &exit) && exit.Exited() {
		return exit.ExitStatus(), nil
	}
	if err != nil {
		return 0, fmt.Errorf("exec in %s/%s: %w", pod.Namespace, pod.Name, err)
	}
	return 0, nil
}
