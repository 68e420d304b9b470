// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

// Command hpmountside is hpmount's half of the KubeVirt peer test
// (test/peer/kubevirt): it attaches (or grows) the volumes it reads as JSON
// on stdin with the real node engine (engine.New, Snapshot, then Attach or
// Grow; op sync and op watch as described on Request), as the agent would,
// and prints each outcome as JSON. It is a program of the root
// module because the peer module cannot link the node engine: KubeVirt
// v1.7.0's runc needs a cilium/ebpf older than the one hpmount's blockdev
// uses, and a Go build holds one version of a module.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"syscall"
	"time"

	"k8s.io/apimachinery/pkg/types"

	"github.com/hpmount/hpmount/agent"
	"github.com/hpmount/hpmount/blockdev"
	"github.com/hpmount/hpmount/engine"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/kubevirt"
	"github.com/hpmount/hpmount/outcome"
)

// Request is what the peer test asks for.
type Request struct {
	// Op is "attach" (the default), "grow", "detach" (what the agent
	// does to a launcher that must hold nothing: every observed volume of
	// the request's launchers whose name is in the request is detached) or
	// "sync" (the agent's pass over its launchers: attach every volume of
	// the request, then detach every observed volume of the request's
	// launchers and of Launchers that the request does not hold) or
	// "watch" (attach, then verify the block volumes of each launcher
	// whose device rules were rewritten, until SIGTERM) or "allowed"
	// (whether hpmount's rule allows each of Rules).
	Op string `json:"op"`
	// Launchers are launchers to sync that hold no desired volume (a VMI
	// gone, a migration source done); op sync only.
	Launchers []types.UID `json:"launchers"`
	// Served is the launcher serving the VMI: op sync observes it even
	// when no volume is desired (the last one unplugged).
	Served      types.UID `json:"served"`
	KubeletRoot string    `json:"kubeletRoot"`
	CgroupRoot  string    `json:"cgroupRoot"`
	// CgroupMode is blockdev's mode; empty is v1.
	CgroupMode  blockdev.CgroupMode `json:"cgroupMode"`
	LauncherDir string              `json:"launcherDir"`
	// Pause is a FIFO that hpmountside reads to its end after its look
	// (the snapshot; for op sync also the observation of the launchers)
	// and before it acts, so that a test can change the node between.
	Pause   string                `json:"pause"`
	Volumes []agent.DesiredVolume `json:"volumes"`
	// VMI is the VMI's UID: op sync leaves what virt-handler's record
	// of it in HandlerStateDir names to virt-handler, as the agent's plan
	// does (agent.HandlerRecord.Leaves) while the launcher's pod is there.
	VMI             types.UID `json:"vmi"`
	HandlerStateDir string    `json:"handlerStateDir"`
	// Rules are op allowed's queries.
	Rules []RuleQuery `json:"rules"`
	// Status is the VMI's status, when the test has one: op sync keeps
	// a volume that left the request's volumes while the domain still
	// holds it, as the agent's plan does (kubevirt.VMI.Keeps).
	Status kubevirt.VMIStatus `json:"status"`
	// PodsGone are launchers whose pod is deleted: nothing in them is
	// left to virt-handler.
	PodsGone []types.UID `json:"podsGone"`
	// StuckAtOnce takes a record naming a gone target for stuck at the
	// first read (engine.Config.HandlerStuckAfter 0): each hpmountside is
	// a new process, which remembers no earlier read.
	StuckAtOnce bool `json:"stuckAtOnce"`
}

// RuleQuery asks op allowed about one device in one container.
type RuleQuery struct {
	PodUID       string `json:"podUID"`
	ContainerID  string `json:"containerID"`
	Major, Minor uint32
}

// Result is one volume's outcome.
type Result struct {
	Name    string `json:"name"`
	Outcome string `json:"outcome"`
	Error   string `json:"error,omitempty"`
	// Grow is Grow's result for op grow.
	Grow *agent.GrowResult `json:"grow,omitempty"`
	// At is when op watch's verify ended.
	At time.Time `json:"at,omitzero"`
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
	cfg := engine.DefaultConfig()
	// The peer node's PID 1 is the test itself, in the node's namespace.
	cfg.Host = isolation.Host{Proc: "/proc", PID: 1}
	cfg.KubeletRoot, cfg.CgroupRoot, cfg.CgroupMode = req.KubeletRoot, req.CgroupRoot, req.CgroupMode
	if cfg.CgroupMode == "" {
		cfg.CgroupMode = blockdev.CgroupV1
	}
	cfg.LauncherDir, cfg.HandlerStateDir = req.LauncherDir, req.HandlerStateDir
	if req.StuckAtOnce {
		cfg.HandlerStuckAfter = 0
	}
	e, err := engine.New(cfg)
	if err != nil {
		return err
	}
	defer e.Close()
	ctx := context.Background()
	snap, err := e.Snapshot(ctx)
	if err != nil {
		return err
	}
	pause := func() error {
		if req.Pause == "" {
			return nil
		}
		return waitFIFO(req.Pause)
	}
	if req.Op == "allowed" {
		out, err := allowed(cfg, req.Rules)
		if err != nil {
			return err
		}
		return json.NewEncoder(os.Stdout).Encode(out)
	}
	if req.Op == "watch" {
		out, err := watch(ctx, e, snap, req.Volumes)
		if err != nil {
			return err
		}
		return json.NewEncoder(os.Stdout).Encode(out)
	}
	if req.Op == "sync" {
		out, err := syncAll(ctx, e, snap, req, pause)
		if err != nil {
			return err
		}
		return json.NewEncoder(os.Stdout).Encode(out)
	}
	if err := pause(); err != nil {
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
			if v.Mode == kubevirt.Directory {
				// The agent's plan grows file and block volumes only.
				continue
			}
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

// watch is the agent's rule watch (agent/rules.go) alone: it attaches
// vols, prints "watching" on stderr, and then, until SIGTERM, verifies
// the block volumes of each launcher whose device rules were rewritten,
// as the agent's pass planned on such a report does. It returns each
// verify whose outcome was not "unchanged" (a lost rule allowed again is
// "created"), with the time it ended.
func watch(ctx context.Context, e *engine.Engine, snap agent.Snapshot, vols []agent.DesiredVolume) ([]Result, error) {
	var out []Result
	for _, v := range vols {
		if _, err := e.Attach(ctx, snap, v); err != nil && v.Mode == kubevirt.Block {
			return nil, fmt.Errorf("attach %s: %w", v.Name, err)
		}
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGTERM)
	defer stop()
	fmt.Fprintln(os.Stderr, "watching")
	err := e.WatchRules(ctx, func(c agent.MountChange) {
		snap, err := e.Snapshot(ctx)
		if err != nil {
			out = append(out, Result{Outcome: "snapshot", Error: err.Error()})
			return
		}
		for _, v := range vols {
			if v.Mode != kubevirt.Block || !slices.Contains(c.Launchers, v.LauncherUID) {
				continue
			}
			r, err := e.Attach(ctx, snap, v)
			if r == outcome.Unchanged && err == nil {
				continue
			}
			res := Result{Name: v.Name, Outcome: string(r), At: time.Now()}
			if err != nil {
				res.Error = err.Error()
			}
			out = append(out, res)
		}
	})
	if ctx.Err() == nil {
		return nil, fmt.Errorf("rule watch ended: %v", err)
	}
	return out, nil
}

// allowed reports, for each query, whether hpmount's own rule lets the
// container open the device (blockdev.DeviceRules.Allowed): on cgroup v2
// a device another writer's program allows is not hpmount's rule.
func allowed(cfg engine.Config, qs []RuleQuery) ([]bool, error) {
	rules, err := blockdev.NewDeviceRules(cfg.CgroupMode, cfg.CgroupRoot)
	if err != nil {
		return nil, err
	}
	var out []bool
	for _, q := range qs {
		ok, err := rules.Allowed(blockdev.Container{PodUID: q.PodUID, ID: q.ContainerID}, blockdev.Device{Major: q.Major, Minor: q.Minor})
		if err != nil {
			return nil, fmt.Errorf("allowed %s %d:%d: %w", q.PodUID, q.Major, q.Minor, err)
		}
		out = append(out, ok)
	}
	return out, nil
}

// detach detaches what the engine observes of vols in their launchers.
func detach(ctx context.Context, e *engine.Engine, snap agent.Snapshot, vols []agent.DesiredVolume) ([]Result, error) {
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

// syncAll is one pass of the agent over the request's volumes' launchers
// and its Launchers: it observes each launcher, attaches every desired
// volume that is not observed healthy (as the agent's plan does: a
// healthy one is left alone), then detaches every observed volume that is
// not desired and not virt-handler's to remove. The detach pass takes a
// fresh snapshot, as the agent's next pass would.
func syncAll(ctx context.Context, e *engine.Engine, snap agent.Snapshot, req Request, pause func() error) ([]Result, error) {
	vols, launchers := req.Volumes, req.Launchers
	var out []Result
	want := map[types.UID]map[string]bool{}
	for _, l := range launchers {
		want[l] = map[string]bool{}
	}
	if req.Served != "" && want[req.Served] == nil {
		want[req.Served] = map[string]bool{}
	}
	healthy := map[types.UID]map[string]bool{}
	for _, v := range vols {
		if healthy[v.LauncherUID] != nil {
			continue
		}
		observed, err := e.Observe(ctx, snap, v.LauncherUID)
		if err != nil {
			return nil, err
		}
		healthy[v.LauncherUID] = map[string]bool{}
		for _, o := range observed {
			healthy[v.LauncherUID][o.Name] = o.Healthy(o.Mode)
		}
	}
	if err := pause(); err != nil {
		return nil, err
	}
	for _, v := range vols {
		if want[v.LauncherUID] == nil {
			want[v.LauncherUID] = map[string]bool{}
		}
		want[v.LauncherUID][v.Name] = true
		if healthy[v.LauncherUID][v.Name] {
			out = append(out, Result{Name: v.Name, Outcome: "healthy"})
			continue
		}
		r, err := e.Attach(ctx, snap, v)
		res := Result{Name: v.Name, Outcome: string(r)}
		if err != nil {
			res.Error = err.Error()
		}
		out = append(out, res)
	}
	snap, err := e.Snapshot(ctx)
	if err != nil {
		return nil, err
	}
	rec, err := e.HandlerRecord(ctx, req.VMI)
	if err != nil {
		return nil, err
	}
	for l, names := range want {
		observed, err := e.Observe(ctx, snap, l)
		if err != nil {
			return nil, err
		}
		for _, o := range observed {
			if names[o.Name] {
				continue
			}
			if !slices.Contains(launchers, l) && req.Status.DomainHolds(o.Name) {
				out = append(out, Result{Name: o.Name, Outcome: "kept: the domain holds it"})
				continue
			}
			if rec.Leaves(l, o.Name) && !slices.Contains(req.PodsGone, l) {
				out = append(out, Result{Name: o.Name, Outcome: "detach " + string(outcome.LeftToHandler)})
				continue
			}
			r, err := e.Detach(ctx, snap, l, o)
			res := Result{Name: o.Name, Outcome: "detach " + string(r)}
			if err != nil {
				res.Error = err.Error()
			}
			out = append(out, res)
		}
	}
	return out, nil
}

// waitFIFO blocks until the FIFO at path has a writer and that writer has
// closed it.
func waitFIFO(path string) error {
	f, err := os.Open(path)
	if err != nil {
		return fmt.Errorf("pause: %w", err)
	}
	defer f.Close()
	_, err = io.Copy(io.Discard, f)
	return err
}
