// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"github.com/spf13/cobra"

	"github.com/hpmount/hpmount/cli"
)

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:           "hpmount",
		Short:         "Node side of KubeVirt volume hotplug",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newDiagCommand(), newAgentCommand(), cli.VersionCommand("hpmount", build()))
	cli.SetVersion(root, build())
	return root
}
