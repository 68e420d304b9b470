// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/hpmount/hpmount/internal/testutil"
	"github.com/hpmount/hpmount/test/cluster"
)

const testNode = "realnode-test"

// env is the control plane and node all tests of the package share.
type env struct {
	stack   *Stack
	dir     string
	cluster *cluster.Cluster
	node    *Node
	admin   *rest.Config
	kube    kubernetes.Interface
	// agentLog is the log of the agent acting on the node now.
	agentLog func(context.Context) string
}

var shared struct {
	once sync.Once
	env  *env
	err  error
}

// sharedEnv starts the control plane and the node on first use.
func sharedEnv(t *testing.T) *env {
	t.Helper()
	testutil.RequiresRoot(t)
	shared.once.Do(func() { shared.env, shared.err = timedStart(t.Logf, startEnv) })
	if shared.err != nil {
		t.Fatalf("start the real node: %v", shared.err)
	}
	return shared.env
}

// timedStart runs start and, only if it worked, logs how long it took: a
// failed start said "control plane and node ready" before its error.
func timedStart(logf func(string, ...any), start func() (*env, error)) (*env, error) {
	began := time.Now()
	e, err := start()
	if err != nil {
		return nil, err
	}
	logf("control plane and node ready in %v", time.Since(began).Round(time.Millisecond))
	return e, nil
}

// hostBefore is the host as TestMain found it, before any node started.
var hostBefore Snapshot

// stopShared tears the shared node down now, checked as TestMain checks
// it, for a test that needs the host's fixed paths to itself (a second
// kubelet clears /var/lib/kubelet/device-plugins, and a node's teardown
// removes what appeared in HostPaths since it started). A later sharedEnv
// starts a new one.
func stopShared(t *testing.T) {
	t.Helper()
	if shared.env == nil {
		return
	}
	r := StopChecked(hostBefore, shared.env.stop)
	shared.env, shared.err, shared.once = nil, nil, sync.Once{}
	if !r.Clean() {
		t.Fatal(r)
	}
	t.Log(r)
}

func startEnv() (*env, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "hpmount-realnode-")
	if err != nil {
		return nil, err
	}
	s, err := StartStack(ctx, dir, testNode)
	if err != nil {
		return nil, err
	}
	return &env{stack: s, dir: dir, cluster: s.Cluster, node: s.Node, admin: s.Admin, kube: s.Kube}, nil
}

func (e *env) stop() error {
	stopHostAgent()
	return e.stack.Stop()
}

// namespace creates a namespace named after the test.
func (e *env) namespace(t *testing.T, ctx context.Context, name string) string {
	t.Helper()
	if err := ensureNamespace(ctx, e.kube, name); err != nil {
		t.Fatal(err)
	}
	return name
}

func ensureNamespace(ctx context.Context, kube kubernetes.Interface, name string) error {
	_, err := kube.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		return nil
	}
	ns := nsObject(name)
	_, err = kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
	return err
}
