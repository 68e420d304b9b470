// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"fmt"
	"io"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// RemoteDiag is `kubectl hpmount diag NODE [VMI...]`.
type RemoteDiag struct {
	Node string
	VMIs []string
	// AgentNamespace is where the agent's DaemonSet runs
	// (DefaultNamespace unless --agent-namespace): never the context's
	// namespace, which names where the VMIs are.
	AgentNamespace string
	// Selector picks the agent pods (the DaemonSet's labels); Container
	// names the agent's container, empty for a pod's only one.
	Selector, Container string
	// DiagArgs are diag's own flags: -o, -A or -n for the VMIs, and what
	// followed `--`.
	DiagArgs []string
}

// Run finds the agent pod of r.Node in r.AgentNamespace, runs diag there,
// and returns diag's exit status.
func (r RemoteDiag) Run(ctx context.Context, k *KubeFlags, stdout, stderr io.Writer) (int, error) {
	cfg, kube, err := k.Clientset()
	if err != nil {
		return 0, err
	}
	pod, err := FindAgentPod(ctx, kube, r.AgentNamespace, r.Selector, r.Node)
	if err != nil {
		return 0, err
	}
	c, err := AgentContainer(pod, r.Container)
	if err != nil {
		return 0, err
	}
	cmd, err := DiagCommand(pod, c, r.DiagArgs, r.VMIs)
	if err != nil {
		return 0, err
	}
	return Exec(ctx, cfg, pod, c.Name, cmd, stdout, stderr)
}

// AgentNodes are the nodes that have an agent pod in namespace ns: the
// completions of NODE.
func AgentNodes(ctx context.Context, k *KubeFlags, ns, selector string) ([]string, error) {
	_, kube, err := k.Clientset()
	if err != nil {
		return nil, err
	}
	list, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: selector})
	if err != nil {
		return nil, fmt.Errorf("list agent pods in namespace %q: %w", ns, err)
	}
	var nodes []string
	for _, p := range list.Items {
		if p.Spec.NodeName != "" {
			nodes = append(nodes, p.Spec.NodeName)
		}
	}
	sort.Strings(nodes)
	return nodes, nil
}
