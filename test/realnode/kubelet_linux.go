// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package realnode

import (
	"encoding/json"
	"fmt"
	"hash/fnv"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/hpmount/hpmount/test/cluster"
)

// cniBinDir holds the plugins of Debian's containernetworking-plugins.
const cniBinDir = "/usr/lib/cni"

// bridgeName is the node's CNI bridge: at most 15 bytes, one per node name.
func bridgeName(node string) string { return fmt.Sprintf("hpm%08x", nameHash(node)) }

// podSubnet is the node's pod range, 10.123.<n>.0/24.
func podSubnet(node string) string { return fmt.Sprintf("10.123.%d.0/24", nameHash(node)%250+1) }

// NodeIP is the node's InternalIP: the gateway address on its CNI bridge.
// The kubelet refuses a loopback node IP ("nodeIP can't be loopback
// address") and then reports no address, so the apiserver could not reach
// it for exec and logs.
func NodeIP(node string) string { return fmt.Sprintf("10.123.%d.1", nameHash(node)%250+1) }

// makeBridge creates the CNI bridge with the node IP before the kubelet
// starts; the bridge plugin then finds it with its gateway address.
func makeBridge(node string) error {
	name := bridgeName(node)
	for _, args := range [][]string{
		{"link", "add", "name", name, "type", "bridge"},
		{"addr", "add", NodeIP(node) + "/24", "dev", name},
		{"link", "set", name, "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			return fmt.Errorf("ip %s: %w: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

func nameHash(s string) uint32 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return h.Sum32()
}

// writeCNIConfig writes a bridge + host-local + loopback conflist; no
// masquerade, so no iptables rule is made. host-local keeps its leases
// under dir, not /var/lib/cni/networks.
func writeCNIConfig(confDir, dataDir, node string) error {
	conf := map[string]any{
		"cniVersion": "1.0.0",
		"name":       "hpmount-realnode",
		"plugins": []any{
			map[string]any{
				"type": "bridge", "bridge": bridgeName(node), "isGateway": true, "ipMasq": false,
				"ipam": map[string]any{
					"type": "host-local", "dataDir": dataDir,
					"ranges": []any{[]any{map[string]any{"subnet": podSubnet(node)}}},
				},
			},
			map[string]any{"type": "loopback"},
		},
	}
	data, err := json.MarshalIndent(conf, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(confDir, 0o755); err != nil {
		return fmt.Errorf("cni conf dir %q: %w", confDir, err)
	}
	path := filepath.Join(confDir, "10-hpmount.conflist")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("write %q: %w", path, err)
	}
	return nil
}

// kubeletConfig is the KubeletConfiguration of the node.
//   - cgroupfs, failSwapOn false, failCgroupV1 false: this machine has a
//     hybrid cgroup layout, and kubelet ≥ 1.35 refuses cgroup v1 by default.
//   - cgroupRoot: the node's pods live under their own cgroup, so two nodes
//     (a test run and make node-up) never share kubepods and teardown
//     removes exactly this node's.
//   - x509 against the cluster CA (the apiserver's kubelet client
//     certificate), authorization by webhook (the apiserver's
//     SubjectAccessReview); no anonymous access.
//   - podLogsDir and volumePluginDir under dir: the defaults are host paths
//     outside --root-dir.
func (n *Node) kubeletConfig(caFile string, port int) map[string]any {
	return map[string]any{
		"apiVersion":               "kubelet.config.k8s.io/v1beta1",
		"kind":                     "KubeletConfiguration",
		"address":                  NodeIP(n.Name),
		"port":                     port,
		"healthzPort":              0,
		"readOnlyPort":             0,
		"cgroupDriver":             "cgroupfs",
		"cgroupRoot":               n.CgroupRoot,
		"failSwapOn":               false,
		"failCgroupV1":             false,
		"containerRuntimeEndpoint": "unix://" + n.ContainerdSocket,
		"podLogsDir":               filepath.Join(n.Dir, "pod-logs"),
		"volumePluginDir":          filepath.Join(n.Dir, "volume-plugins"),
		"resolvConf":               "",
		"authentication": map[string]any{
			"anonymous": map[string]any{"enabled": false},
			"webhook":   map[string]any{"enabled": false},
			"x509":      map[string]any{"clientCAFile": caFile},
		},
		"authorization":                 map[string]any{"mode": "Webhook"},
		"syncFrequency":                 "5s",
		"nodeStatusUpdateFrequency":     "4s",
		"imageGCHighThresholdPercent":   100,
		"imageGCLowThresholdPercent":    99,
		"evictionHard":                  map[string]string{"memory.available": "1Mi", "nodefs.available": "1%", "imagefs.available": "1%"},
		"serializeImagePulls":           false,
		"registerNode":                  true,
		"localStorageCapacityIsolation": false,
	}
}

// startKubelet writes the kubelet's config and kubeconfig and starts it.
func (n *Node) startKubelet(c *cluster.Cluster, bin string, port int) (*cluster.Child, error) {
	kubeconfig := filepath.Join(n.Dir, "kubelet.kubeconfig")
	if err := cluster.WriteKubeconfig(kubeconfig, c.NodeConfig(n.Name)); err != nil {
		return nil, err
	}
	data, err := json.MarshalIndent(n.kubeletConfig(c.CAFile(), port), "", "  ")
	if err != nil {
		return nil, err
	}
	config := filepath.Join(n.Dir, "kubelet-config.json")
	if err := os.WriteFile(config, data, 0o644); err != nil {
		return nil, fmt.Errorf("write %q: %w", config, err)
	}
	return cluster.StartChild("kubelet", bin, []string{
		"--config=" + config,
		"--kubeconfig=" + kubeconfig,
		"--root-dir=" + n.KubeletRoot,
		"--cert-dir=" + filepath.Join(n.Dir, "kubelet-pki"),
		"--hostname-override=" + n.Name,
		"--node-ip=" + NodeIP(n.Name),
		"--v=2",
	}, filepath.Join(n.Dir, "kubelet.log"))
}
