// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"github.com/spf13/cobra"

	"github.com/hpmount/hpmount/plugin"
)

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "hpmount",
		Short:         "Node side of KubeVirt volume hotplug",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newDiagCommand(), newAgentCommand(), plugin.VersionCommand("hpmount", build()))
	plugin.SetVersion(root, build())
	return root
}
