// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/hpmount/hpmount/test/cluster"
	"github.com/hpmount/hpmount/test/harness"
)

// Options configure Start.
type Options struct {
	// Name is the node's name; the cluster must trust it (cluster.Options.Nodes).
	Name string
	// Dir receives everything of the node; created, removed by Stop.
	Dir string
	// ToolsDir holds the kubelet; default cluster.DefaultToolsDir().
	ToolsDir string
}

// Node is a running containerd and kubelet registered with a cluster.
type Node struct {
	Name string
	// Dir holds containerd's root and state, the kubelet's root, logs and
	// configs.
	Dir string
	// KubeletRoot is --root-dir, a shared mount in this mount namespace.
	KubeletRoot      string
	ContainerdSocket string
	// CgroupRoot is the kubelet's cgroupRoot, under every hierarchy.
	CgroupRoot string
	// Kube is an admin client of the cluster.
	Kube kubernetes.Interface

	cluster    *cluster.Cluster
	containerd *cluster.Child
	kubelet    *cluster.Child
	csi        *cluster.Child
	before     Snapshot
}

// Start brings a node up: containerd with the images loaded, the CNI
// config, and the kubelet; it returns once the Node is Ready. On failure
// everything started is torn down and the error carries the logs.
func Start(ctx context.Context, c *cluster.Cluster, o Options) (*Node, error) {
	if o.ToolsDir == "" {
		o.ToolsDir = cluster.DefaultToolsDir()
	}
	kubelet := filepath.Join(o.ToolsDir, "kubelet")
	if _, err := os.Stat(kubelet); err != nil {
		return nil, fmt.Errorf("%w: %v", cluster.ErrToolsMissing, err)
	}
	kube, err := kubernetes.NewForConfig(c.AdminConfig())
	if err != nil {
		return nil, err
	}
	n := &Node{Name: o.Name, Dir: o.Dir, KubeletRoot: filepath.Join(o.Dir, "kubelet"),
		ContainerdSocket: socketPath(filepath.Join(o.Dir, "containerd")),
		CgroupRoot:       cgroupRoot(o.Name), Kube: kube, cluster: c, before: TakeSnapshot()}
	if err := n.start(ctx, kubelet); err != nil {
		return nil, errors.Join(err, n.Stop())
	}
	return n, nil
}

func (n *Node) start(ctx context.Context, kubelet string) error {
	if err := os.MkdirAll(n.KubeletRoot, 0o750); err != nil {
		return fmt.Errorf("kubelet root %q: %w", n.KubeletRoot, err)
	}
	// The kubelet's volumes reach containers with HostToContainer
	// propagation only from a shared mount.
	if err := unix.Mount(n.KubeletRoot, n.KubeletRoot, "", unix.MS_BIND, ""); err != nil {
		return fmt.Errorf("bind kubelet root %q: %w", n.KubeletRoot, err)
	}
	if err := unix.Mount("", n.KubeletRoot, "", unix.MS_SHARED|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("make kubelet root %q rshared: %w", n.KubeletRoot, err)
	}
	if err := makeCgroupRoot(n.CgroupRoot); err != nil {
		return err
	}
	if err := makeBridge(n.Name); err != nil {
		return err
	}
	cd := filepath.Join(n.Dir, "containerd")
	if err := writeCNIConfig(filepath.Join(cd, "net.d"), filepath.Join(n.Dir, "cni"), n.Name); err != nil {
		return err
	}
	var err error
	if n.containerd, err = startContainerd(ctx, cd); err != nil {
		return err
	}
	if err := n.loadImages(ctx); err != nil {
		return err
	}
	port, err := freePort()
	if err != nil {
		return err
	}
	if n.kubelet, err = n.startKubelet(n.cluster, kubelet, port); err != nil {
		return err
	}
	if err := n.waitReady(ctx); err != nil {
		return fmt.Errorf("%w\n%s%s", err, n.kubelet.Tail(40), n.containerd.Tail(20))
	}
	return n.startCSI(ctx)
}

func (n *Node) loadImages(ctx context.Context) error {
	dir := filepath.Join(n.Dir, "images")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	pause, err := pauseImage(ctx, dir)
	if err != nil {
		return err
	}
	busybox, err := busyboxImage(ctx)
	if err != nil {
		return err
	}
	for _, img := range []Image{pause, busybox} {
		if err := importImage(ctx, n.ContainerdSocket, dir, img); err != nil {
			return err
		}
	}
	return nil
}

// waitReady waits for the Node object's Ready condition.
func (n *Node) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	last := "not registered"
	for {
		node, err := n.Kube.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
		if err == nil {
			last = "no Ready condition"
			for _, c := range node.Status.Conditions {
				if c.Type == corev1.NodeReady {
					if c.Status == corev1.ConditionTrue {
						return nil
					}
					last = c.Reason + ": " + c.Message
				}
			}
		}
		select {
		case <-n.kubelet.Done():
			return n.kubelet.ExitError()
		case <-ctx.Done():
			return fmt.Errorf("node %q not ready: %w (%s)", n.Name, ctx.Err(), last)
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// Logs is the tail of the kubelet's and containerd's logs.
func (n *Node) Logs(lines int) string {
	var s string
	for _, c := range []*cluster.Child{n.kubelet, n.containerd, n.csi} {
		if c != nil {
			s += c.Tail(lines)
		}
	}
	return s
}

// cgroupRoot is the kubelet's cgroupRoot for node.
func cgroupRoot(node string) string { return "/hpmount-" + node }

func freePort() (int, error) {
	addr, err := harness.FreeAddr()
	if err != nil {
		return 0, err
	}
	var port int
	_, err = fmt.Sscanf(addr, "127.0.0.1:%d", &port)
	return port, err
}

// KubeletPID is the kubelet's process id: a process in the node's mount
// namespace, which the agent's --host-pid names.
func (n *Node) KubeletPID() int { return n.kubelet.Pid() }
