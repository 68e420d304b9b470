// Command hpmountside is hpmount's half of the KubeVirt peer test
// (test/peer/kubevirt): it attaches the volumes it reads as JSON on stdin
// with the real node engine (node.New, Snapshot, Attach), as the agent
// would, and prints each outcome as JSON. It is a program of the root
// module because the peer module cannot link the node engine: KubeVirt
// v1.7.0's runc needs a cilium/ebpf older than the one hpmount's blockdev
// uses, and a Go build holds one version of a module.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"

	"github.com/hpmount/hpmount/agent"
	"github.com/hpmount/hpmount/blockdev"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/node"
)

// Request is what the peer test asks for.
type Request struct {
	KubeletRoot string                `json:"kubeletRoot"`
	CgroupRoot  string                `json:"cgroupRoot"`
	LauncherDir string                `json:"launcherDir"`
	Volumes     []agent.DesiredVolume `json:"volumes"`
}

// Result is one volume's outcome.
type Result struct {
	Name    string `json:"name"`
	Outcome string `json:"outcome"`
	Error   string `json:"error,omitempty"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "hpmountside: %v\n", err)
		os.Exit(1)
	}
}

func run() error {
	var req Request
	if err := json.NewDecoder(os.Stdin).Decode(&req); err != nil {
		return fmt.Errorf("read request: %w", err)
	}
	cfg := node.DefaultConfig()
	// The peer node's PID 1 is the test itself, in the node's namespace.
	cfg.Host = isolation.Host{Proc: "/proc", PID: 1}
	cfg.KubeletRoot, cfg.CgroupRoot, cfg.CgroupMode = req.KubeletRoot, req.CgroupRoot, blockdev.CgroupV1
	cfg.LauncherDir = req.LauncherDir
	e, err := node.New(cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	ctx := context.Background()
	snap, err := e.Snapshot(ctx)
	if err != nil {
		return err
	}
	var out []Result
	for _, v := range req.Volumes {
		r, err := e.Attach(ctx, snap, v)
		res := Result{Name: v.Name, Outcome: fmt.Sprint(r)}
		if err != nil {
			res.Error = err.Error()
		}
		out = append(out, res)
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}
