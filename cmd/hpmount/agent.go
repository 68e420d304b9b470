// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"
	"fmt"
	"os"
	"runtime/debug"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/hpmount/hpmount/agent"
	"github.com/hpmount/hpmount/cli"
	"github.com/hpmount/hpmount/engine"
	"github.com/hpmount/hpmount/metrics"
)

func newAgentCommand() *cobra.Command {
	cfg := agent.DefaultConfig()
	cfg.NodeName = os.Getenv("NODE_NAME")
	nc := engine.DefaultConfig()
	api := defaultAPIFlags()
	logs := cli.DefaultLogFlags()
	stuckLimit := 5 * time.Minute
	cmd := &cobra.Command{
		Use:   "agent",
		Short: "Run the per-node hotplug agent",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			logger, err := logs.Logger(os.Stderr)
			if err != nil {
				return cli.UsageError{Err: err}
			}
			cfg.Logger = logger
			nc.Grow.Filesystems = cfg.GrowFilesystems
			return runAgent(cmd, cfg, nc, api, stuckLimit)
		},
	}
	f := cmd.Flags()
	api.bind(f, "")
	logs.Bind(f)
	f.StringVar(&cfg.NodeName, "node-name", cfg.NodeName, "node this agent serves (default $NODE_NAME)")
	nodeFlags(f, nodeLocation{&nc.Host, &nc.KubeletRoot, &nc.CgroupRoot, &nc.CgroupMode, &nc.HandlerStateDir})
	f.StringVar(&cfg.MetricsAddress, "metrics-address", cfg.MetricsAddress, "address of /metrics; empty disables")
	f.BoolVar(&cfg.Profiling, "profiling", cfg.Profiling, "serve Go's profiler at /debug/pprof/ on --metrics-address")
	f.StringVar(&cfg.HealthAddress, "health-address", cfg.HealthAddress, "address of /healthz and /readyz; empty disables")
	f.IntVar(&nc.UID, "qemu-uid", nc.UID, "owner uid of what is made in the launcher")
	f.IntVar(&nc.GID, "qemu-gid", nc.GID, "owner gid of what is made in the launcher")
	f.BoolVar(&cfg.ReportVolumeStatus, "report-volume-status", cfg.ReportVolumeStatus, "patch the VMI's status.volumeStatus (MountedToPod/UnMountedFromPod)")
	f.BoolVar(&cfg.GrowFilesystems, "grow-filesystems", cfg.GrowFilesystems, "grow mounted filesystem-mode volumes online")
	f.BoolVar(&nc.CreateDiskImages, strings.TrimPrefix(engine.CreateDiskImagesFlag, "--"), nc.CreateDiskImages, "create a filesystem-mode PVC's missing disk.img (never imported, kubevirt#14491): exclusively, sparse, 107:107, (1 - filesystemOverhead) x min(capacity, free), MiB-aligned; never touches an existing file")
	f.BoolVar(&nc.Grow.DiskImages, "expand-disk-images", nc.Grow.DiskImages, "also grow disk.img to KubeVirt's usable size for the claim: (1 - filesystemOverhead) x min(capacity, free + allocated), MiB-aligned; never shrinks")
	f.BoolVar(&nc.MountEvents, "mount-events", nc.MountEvents, "repair a foreign change to a target as soon as the kernel reports it (fanotify mount events, Linux >= 6.15); off or unsupported, it is repaired at the next resync")
	f.DurationVar(&cfg.ResyncPeriod, "resync-period", cfg.ResyncPeriod, "how often every VMI is reconciled without an API change")
	f.IntVar(&cfg.Workers, "workers", cfg.Workers, "reconcile workers")
	f.DurationVar(&nc.CallTimeout, "call-timeout", nc.CallTimeout, "deadline of one call in the host mount namespace; a call past it is abandoned and reported (HotplugStuck) while the others go on")
	f.DurationVar(&nc.GrowTimeout, "grow-timeout", nc.GrowTimeout, "deadline of one online filesystem growth, which runs on a thread of its own")
	f.DurationVar(&stuckLimit, "stuck-limit", stuckLimit, "/healthz fails once an abandoned call has been stuck this long, so the liveness probe restarts the agent")
	return cmd
}

func runAgent(cmd *cobra.Command, cfg agent.Config, nc engine.Config, api apiFlags, stuckLimit time.Duration) error {
	if err := errors.Join(cfg.Validate(), nc.Validate(), api.validate()); err != nil {
		return cli.UsageError{Err: err}
	}
	collectSooner()
	// client-go reports its requests to the metrics registered before its
	// first client.
	m := metrics.New(build().Version, build().Revision)
	m.RegisterClientMetrics()
	kube, dyn, err := api.clients("hpmount/" + build().Version)
	if err != nil {
		return err
	}
	// Events get a client, and so a rate limiter, of their own.
	if cfg.EventClient, _, err = api.clients("hpmount/" + build().Version); err != nil {
		return err
	}
	eng, err := engine.New(nc)
	if err != nil {
		return fmt.Errorf("node engine: %w", err)
	}
	defer eng.Close()
	if n, err := eng.SweepGrowthLeftovers(); err != nil || n > 0 {
		cfg.Logger.Warn("swept growth mounts an older hpmount left behind", "count", n, "error", fmt.Sprint(err))
	}
	m.StuckThreads(eng.StuckThreads)
	cfg.Observer = m
	cfg.QueueMetrics = m.WorkqueueProvider()
	cfg.MetricsHandler = m.Handler()
	cfg.ReadinessGate = eng.CheckPropagation
	cfg.LivenessCheck = eng.Liveness(stuckLimit)
	a, err := agent.New(cfg, kube, dyn, eng)
	if err != nil {
		return err
	}
	logStart(cfg, nc, eng.Features())
	return a.Run(cmd.Context())
}

// logStart is the agent's first line: what it is and the settings an
// operator looks for first when its behaviour surprises. The agent's last
// line says that it stopped and left the mounts in place.
func logStart(cfg agent.Config, nc engine.Config, f engine.Features) {
	b := build()
	cfg.Logger.Info("hpmount agent starting", "version", b.Version, "revision", b.Revision, "go", b.GoVersion,
		"node", cfg.NodeName, "kubeletRoot", nc.KubeletRoot, "cgroupMode", nc.CgroupMode, "cgroupRoot", nc.CgroupRoot,
		"kubevirtStateDir", nc.HandlerStateDir, "mountEvents", nc.MountEvents, "createDiskImages", nc.CreateDiskImages,
		"growFilesystems", cfg.GrowFilesystems, "expandDiskImages", nc.Grow.DiskImages,
		"reportVolumeStatus", cfg.ReportVolumeStatus, "resyncPeriod", cfg.ResyncPeriod.String(), "workers", cfg.Workers,
		"kernelStatmount", found(f.Statmount), "kernelOpenat2", found(f.Openat2), "kernelMountEvents", found(f.MountEvents))
}

// found is a kernel feature in the start line: "yes", or why not.
func found(err error) string {
	if err != nil {
		return "no: " + err.Error()
	}
	return "yes"
}

// agentGCPercent is the agent's GOGC unless the environment sets one. Its
// live heap is small and steady (the node's VMIs, pods and claims), and at
// Go's default of 100 a settled agent holds as much garbage again until
// the next cycle: that garbage was a third of its resident memory at 500
// VMIs. The cycles it adds fall on a node that is idle most of the time.
const agentGCPercent = 50

func collectSooner() {
	if _, set := os.LookupEnv("GOGC"); !set {
		debug.SetGCPercent(agentGCPercent)
	}
}
