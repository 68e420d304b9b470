// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"

	"github.com/hpmount/hpmount/test/cluster"
	"github.com/hpmount/hpmount/test/repo"
	"github.com/hpmount/hpmount/test/simnode"
)

// The agent's ServiceAccount, as deploy/ names it.
const (
	AgentNamespace      = "hpmount-system"
	AgentServiceAccount = "hpmount"
)

// AgentKubeconfig binds the agent's ClusterRole from the RBAC manifest
// (rbac; "" is the repository's deploy/rbac.yaml) for real and writes to
// path a kubeconfig with a token of its ServiceAccount: a permission the
// agent lacks then fails whatever runs it. It returns the kind/name of
// each object applied.
func AgentKubeconfig(ctx context.Context, c *cluster.Cluster, ctrl *simnode.Controller, rbac, path string) ([]string, error) {
	if rbac == "" {
		root, err := repo.Root()
		if err != nil {
			return nil, err
		}
		rbac = filepath.Join(root, "deploy", "rbac.yaml")
	}
	manifest, err := os.ReadFile(rbac)
	if err != nil {
		return nil, fmt.Errorf("read rbac: %w", err)
	}
	if err := ctrl.EnsureNamespace(ctx, AgentNamespace); err != nil {
		return nil, err
	}
	objs, err := cluster.ApplyManifests(ctx, c.AdminConfig(), manifest, false)
	if err != nil {
		return nil, fmt.Errorf("apply deploy/rbac.yaml: %w", err)
	}
	cfg, err := c.ServiceAccountConfig(ctx, AgentNamespace, AgentServiceAccount)
	if err != nil {
		return nil, fmt.Errorf("service account token: %w", err)
	}
	if err := cluster.WriteKubeconfig(path, cfg); err != nil {
		return nil, fmt.Errorf("agent kubeconfig: %w", err)
	}
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.GetKind()+"/"+o.GetName())
	}
	return kinds, nil
}

// VolumeStatusRBAC is deploy/volume-status/rbac.yaml: the ClusterRole and
// binding that let the agent's ServiceAccount patch VMIs, which only
// --report-volume-status needs (the base grants no patch).
const VolumeStatusRBAC = "deploy/volume-status/rbac.yaml"

// GrantVolumeStatus applies VolumeStatusRBAC of the repository for real, as
// the volume-status component does next to the base, for an agent run with
// --report-volume-status. It returns the kind/name of each object applied.
func GrantVolumeStatus(ctx context.Context, c *cluster.Cluster) ([]string, error) {
	root, err := repo.Root()
	if err != nil {
		return nil, err
	}
	manifest, err := os.ReadFile(filepath.Join(root, VolumeStatusRBAC))
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", VolumeStatusRBAC, err)
	}
	objs, err := cluster.ApplyManifests(ctx, c.AdminConfig(), manifest, false)
	if err != nil {
		return nil, fmt.Errorf("apply %s: %w", VolumeStatusRBAC, err)
	}
	var kinds []string
	for _, o := range objs {
		kinds = append(kinds, o.GetKind()+"/"+o.GetName())
	}
	return kinds, nil
}

// Events lists the Events about one VMI.
func Events(ctx context.Context, kube kubernetes.Interface, ns, vmi string) ([]corev1.Event, error) {
	sel := fields.AndSelectors(fields.OneTermEqualSelector("involvedObject.name", vmi),
		fields.OneTermEqualSelector("involvedObject.kind", "VirtualMachineInstance")).String()
	list, err := kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return nil, err
	}
	return list.Items, nil
}

// FindEvent returns an Event about the VMI with reason whose message
// contains substr, or an error to retry on.
func FindEvent(ctx context.Context, kube kubernetes.Interface, ns, vmi, reason, substr string) (corev1.Event, error) {
	events, err := Events(ctx, kube, ns, vmi)
	if err != nil {
		return corev1.Event{}, err
	}
	for _, ev := range events {
		if ev.Reason == reason && strings.Contains(ev.Message, substr) {
			return ev, nil
		}
	}
	return corev1.Event{}, fmt.Errorf("no %s event with %q yet", reason, substr)
}

// StartControlPlane starts etcd and kube-apiserver in dir (created, 0700)
// with the VMI CRD installed, for a program; tests use cluster.Start.
func StartControlPlane(ctx context.Context, dir string) (*cluster.Cluster, error) {
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, err
	}
	c, err := cluster.StartProcess(ctx, cluster.Options{WorkDir: dir})
	if err != nil {
		return nil, fmt.Errorf("start control plane: %w", err)
	}
	if err := c.InstallVMICRD(ctx); err != nil {
		_ = c.Stop()
		return nil, fmt.Errorf("install VMI CRD: %w", err)
	}
	return c, nil
}
