// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Command realnode runs the real node of test/realnode for a person to poke
// at by hand (make node-up, make node-down): a control plane, containerd,
// the kubelet, the CNI bridge and the test CSI plugin, and, if asked, the
// agent as deployed, all in a private mount namespace of a background
// process, torn down by the same Stack.Stop the tests use.
//
//	realnode up [--dir DIR] [--name NODE] [--agent --binary bin/hpmount]
//	realnode down [--dir DIR]
//
// up returns once the node is Ready and prints how to reach it; the state
// (pids, kubeconfig, root dir, API address) is in DIR/state.json. down
// signals the background process, waits for its teardown and reports
// anything left behind on the host. Run from the repository: the CSI
// plugin, the pause image and deploy/ are built and read from it.
package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// State is what up leaves in DIR/state.json for down and for people.
type State struct {
	// PID is the process holding the node, in its private mount namespace.
	PID              int    `json:"pid"`
	Ready            bool   `json:"ready"`
	Error            string `json:"error,omitempty"`
	Node             string `json:"node"`
	Dir              string `json:"dir"`
	Log              string `json:"log"`
	Kubeconfig       string `json:"kubeconfig"`
	APIServer        string `json:"apiServer"`
	CAFile           string `json:"caFile"`
	Token            string `json:"token"`
	KubeletRoot      string `json:"kubeletRoot"`
	ContainerdSocket string `json:"containerdSocket"`
	CallLog          string `json:"csiCallLog"`
	KubeletPID       int    `json:"kubeletPid"`
	AgentPod         string `json:"agentPod,omitempty"`
	AgentHealth      string `json:"agentHealth,omitempty"`
	AgentMetrics     string `json:"agentMetrics,omitempty"`
}

type options struct {
	dir, name, binary string
	agent             bool
}

func main() {
	if len(os.Args) < 2 {
		usage(os.Stderr)
		os.Exit(2)
	}
	cmd := os.Args[1]
	var o options
	f := flag.NewFlagSet(cmd, flag.ExitOnError)
	f.StringVar(&o.dir, "dir", "/tmp/hpmount-node-up", "where the node, its state and its log live")
	f.StringVar(&o.name, "name", "realnode-up", "the node's name")
	f.BoolVar(&o.agent, "agent", false, "also run the agent as deployed (a pod from deploy/'s DaemonSet)")
	f.StringVar(&o.binary, "binary", "bin/hpmount", "the static hpmount binary packed as the agent's image (make build)")
	_ = f.Parse(os.Args[2:])
	if abs, err := filepath.Abs(o.dir); err == nil {
		o.dir = abs
	}
	var err error
	switch cmd {
	case "up":
		err = up(o)
	case "serve":
		err = serve(o)
	case "down":
		err = down(o)
	default:
		usage(os.Stderr)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "realnode %s: %v\n", cmd, err)
		os.Exit(1)
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: realnode up [--dir DIR] [--name NODE] [--agent --binary bin/hpmount] | realnode down [--dir DIR]")
}

func statePath(dir string) string { return filepath.Join(dir, "state.json") }

// reportPath is where serve writes the teardown's result for down.
func reportPath(dir string) string { return filepath.Join(dir, "down.json") }

func readState(dir string) (State, error) {
	var s State
	data, err := os.ReadFile(statePath(dir))
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal(data, &s)
}

func writeState(s State) error {
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	tmp := statePath(s.Dir) + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, statePath(s.Dir))
}

// describe is what up prints: how to reach the node without kubectl.
func describe(s State) string {
	var b strings.Builder
	fmt.Fprintf(&b, "real node %s is up (pid %d holds it; everything under %s; log %s)\n", s.Node, s.PID, s.Dir, s.Log)
	fmt.Fprintf(&b, "  admin kubeconfig:  %s   (KUBECONFIG=%s kubectl get pods -A, with any kubectl)\n", s.Kubeconfig, s.Kubeconfig)
	fmt.Fprintf(&b, "  API without kubectl:\n    curl --cacert %s -H 'Authorization: Bearer %s' %s/api/v1/nodes\n", s.CAFile, s.Token, s.APIServer)
	fmt.Fprintf(&b, "  kubelet root:      %s (kubelet pid %d)\n", s.KubeletRoot, s.KubeletPID)
	fmt.Fprintf(&b, "  the node's mounts: nsenter -t %d -m -- findmnt -R %s\n", s.PID, s.KubeletRoot)
	fmt.Fprintf(&b, "  containers:        nsenter -t %d -m -- ctr --address %s -n k8s.io containers ls\n", s.PID, s.ContainerdSocket)
	fmt.Fprintf(&b, "  a shell there:     nsenter -t %d -m -- bash\n", s.PID)
	fmt.Fprintf(&b, "  CSI call log:      %s\n", s.CallLog)
	if s.AgentPod != "" {
		fmt.Fprintf(&b, "  agent pod:         %s  (curl http://%s/readyz, curl http://%s/metrics)\n", s.AgentPod, s.AgentHealth, s.AgentMetrics)
	}
	fmt.Fprintf(&b, "  tear down:         make node-down (or realnode down --dir %s)\n", s.Dir)
	return b.String()
}
