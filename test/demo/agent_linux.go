// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"os"
	"time"

	"github.com/hpmount/hpmount/test/harness"
)

// startAgent runs the agent with the simulated node as its host: this
// process's mount namespace and mountinfo, the node's kubelet root and
// device cgroup subtree. Its log is appended to d.agentLog.
func (d *demo) startAgent() error {
	log, err := os.OpenFile(d.agentLog, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("agent log: %w", err)
	}
	defer log.Close() // the child holds its own copy
	args := []string{"--report-volume-status", "--grow-filesystems"}
	fmt.Fprintf(log, "# demo: starting %s agent ... %v\n", d.binary, args)
	a, err := harness.StartAgent(harness.AgentOptions{Binary: d.binary, Kubeconfig: d.agentKC, Node: d.node,
		Resync: 2 * time.Second, Args: args, Log: log})
	if err != nil {
		return err
	}
	d.agent = a
	item("%s agent --node-name %s --host-pid %d --cgroup-mode v1 --resync-period 2s", d.binary, nodeName, os.Getpid())
	item("    --report-volume-status --grow-filesystems (full command line in the log)")
	if err := d.eventually("agent /readyz", waitTimeout, a.Ready); err != nil {
		return err
	}
	item("pid %d, ready in %s; metrics http://%s/metrics, health http://%s/readyz",
		a.Pid(), time.Since(a.Started).Round(time.Millisecond), a.MetricsAddr, a.HealthAddr)
	item("log (JSON, not shown here): %s", d.agentLog)
	return nil
}
