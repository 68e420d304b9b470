// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Package cli holds what the hpmount and kubectl-hpmount commands share
// with kubectl: loading the kubeconfig the kubectl way (KubeFlags), the
// Kubernetes components' logging flags with klog routed into the same
// logger (LogFlags), exit statuses (Execute: 2 for usage and flag
// errors), and the remote diag of
// `kubectl hpmount diag NODE [VMI...]` (RemoteDiag): find the node's agent
// pod by the DaemonSet's labels and spec.nodeName, in the agent's own
// namespace (never the context's, which is the VMIs'), and run `hpmount diag`
// in it with the agent's own node flags, through the API server's
// pods/exec as `kubectl exec` does.
//
// It owns the command lines and client setup. It refuses the diagnosis
// itself (package diag runs inside the agent pod) and any change to the
// cluster: it lists pods and execs, nothing else.
package cli
