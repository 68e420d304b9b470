// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/hpmount/hpmount/test/cluster"
)

// Stack is a control plane and one real node: what the package's tests
// share and what `make node-up` runs. The cluster keeps the ServiceAccount
// admission plugin, so pods get their token projected as on a real
// cluster, and a NamespacePublisher stands in for the two controllers that
// plugin relies on.
type Stack struct {
	// Dir holds the cluster's and the node's files; Stop removes it.
	Dir     string
	Cluster *cluster.Cluster
	Node    *Node
	Admin   *rest.Config
	Kube    kubernetes.Interface
	// Agent is the agent pod, when DeployAgent was asked for.
	Agent     *DeployedAgent
	publisher *NamespacePublisher
}

// StartStack starts etcd, kube-apiserver (trusting node), the namespace
// publisher, the VMI CRD and the node, all under dir (created). First it
// clears what an earlier Stack of node left behind when its harness died
// without a teardown (clearLeftovers), and marks what it starts as this
// process's (ownerEnv). On failure everything started is stopped.
func StartStack(ctx context.Context, dir, node string) (*Stack, error) {
	if err := clearLeftovers(node, dir); err != nil {
		return nil, fmt.Errorf("clear what an earlier run of node %q left: %w", node, err)
	}
	if err := markOwner(node, dir); err != nil {
		return nil, fmt.Errorf("mark the harness's processes: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "cluster"), 0o700); err != nil {
		return nil, err
	}
	c, err := cluster.StartProcess(ctx, cluster.Options{WorkDir: filepath.Join(dir, "cluster"),
		Nodes: []string{node}, ServiceAccountAdmission: true})
	if err != nil {
		return nil, errors.Join(err, os.RemoveAll(dir))
	}
	s := &Stack{Dir: dir, Cluster: c, Admin: c.AdminConfig()}
	if err := s.start(ctx, node); err != nil {
		return nil, errors.Join(fmt.Errorf("%w\n%s", err, c.Logs(20)), s.Stop())
	}
	return s, nil
}

func (s *Stack) start(ctx context.Context, node string) error {
	var err error
	if s.Kube, err = kubernetes.NewForConfig(s.Admin); err != nil {
		return err
	}
	if s.publisher, err = PublishNamespaceDefaults(context.Background(), s.Kube, s.Cluster.CAFile()); err != nil {
		return err
	}
	if err := s.Cluster.InstallVMICRD(ctx); err != nil {
		return err
	}
	s.Node, err = Start(ctx, s.Cluster, Options{Name: node, Dir: filepath.Join(s.Dir, "node")})
	return err
}

// Stop stops the agent pod, the node (Node.Stop: everything it made on the
// host), the publisher and the control plane, and removes Dir.
func (s *Stack) Stop() error {
	var errs []error
	if s.Agent != nil {
		errs = append(errs, s.Agent.Stop(context.Background()))
	}
	if s.Node != nil {
		errs = append(errs, s.Node.Stop())
	}
	if s.publisher != nil {
		errs = append(errs, s.publisher.Stop())
	}
	errs = append(errs, s.Cluster.Stop(), os.RemoveAll(s.Dir))
	return errors.Join(errs...)
}
