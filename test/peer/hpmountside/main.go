// Command hpmountside is hpmount's half of the KubeVirt peer test
// (test/peer/kubevirt): it attaches (or grows) the volumes it reads as JSON
// on stdin with the real node engine (node.New, Snapshot, then Attach or
// Grow), as the agent would, and prints each outcome as JSON. It is a program of the root
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
	"github.com/hpmount/hpmount/outcome"
)

// Request is what the peer test asks for.
type Request struct {
	// Op is "attach" (the default), "grow" or "detach" (what the agent
	// does to a launcher that must hold nothing: every observed volume of
	// the request's launchers whose name is in the request is detached).
	Op          string `json:"op"`
	KubeletRoot string `json:"kubeletRoot"`
	CgroupRoot  string `json:"cgroupRoot"`
	// CgroupMode is blockdev's mode; empty is v1.
	CgroupMode  blockdev.CgroupMode   `json:"cgroupMode"`
	LauncherDir string                `json:"launcherDir"`
	Volumes     []agent.DesiredVolume `json:"volumes"`
}

// Result is one volume's outcome.
type Result struct {
	Name    string `json:"name"`
	Outcome string `json:"outcome"`
	Error   string `json:"error,omitempty"`
	// Grow is Grow's result for op grow.
	Grow *agent.GrowResult `json:"grow,omitempty"`
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
	cfg.KubeletRoot, cfg.CgroupRoot, cfg.CgroupMode = req.KubeletRoot, req.CgroupRoot, req.CgroupMode
	if cfg.CgroupMode == "" {
		cfg.CgroupMode = blockdev.CgroupV1
	}
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
	if req.Op == "detach" {
		out, err := detach(ctx, e, snap, req.Volumes)
		if err != nil {
			return err
		}
		return json.NewEncoder(os.Stdout).Encode(out)
	}
	var out []Result
	for _, v := range req.Volumes {
		var res Result
		var err error
		switch req.Op {
		case "", "attach":
			var r outcome.Result
			r, err = e.Attach(ctx, snap, v)
			res = Result{Name: v.Name, Outcome: string(r)}
		case "grow":
			var g agent.GrowResult
			g, err = e.Grow(ctx, snap, v)
			res = Result{Name: v.Name, Outcome: "checked", Grow: &g}
		default:
			return fmt.Errorf("unknown op %q", req.Op)
		}
		if err != nil {
			res.Error = err.Error()
		}
		out = append(out, res)
	}
	return json.NewEncoder(os.Stdout).Encode(out)
}

// detach detaches what the engine observes of vols in their launchers.
func detach(ctx context.Context, e *node.Engine, snap agent.Snapshot, vols []agent.DesiredVolume) ([]Result, error) {
	var out []Result
	for _, v := range vols {
		observed, err := e.Observe(ctx, snap, v.LauncherUID)
		if err != nil {
			return nil, err
		}
		for _, o := range observed {
			if o.Name != v.Name {
				continue
			}
			r, err := e.Detach(ctx, snap, v.LauncherUID, o)
			res := Result{Name: v.Name, Outcome: string(r)}
			if err != nil {
				res.Error = err.Error()
			}
			out = append(out, res)
		}
	}
	return out, nil
}
