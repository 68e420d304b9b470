// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/hpmount/hpmount/plugin"
)

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "kubectl-hpmount",
		Short: "hpmount's kubectl plugin: diagnose a node's hotplug volumes from anywhere",
		Annotations: map[string]string{
			cobra.CommandDisplayNameAnnotation: "kubectl hpmount",
		},
	}
	root.AddCommand(newDiagCommand(), plugin.VersionCommand("kubectl-hpmount", build()))
	plugin.SetVersion(root, build())
	return root
}

// newDiagCommand is `kubectl hpmount diag NODE [VMI...] [-- diag flags]`.
func newDiagCommand() *cobra.Command {
	var k plugin.KubeFlags
	r := plugin.RemoteDiag{Selector: plugin.DefaultSelector}
	var output, vmiNamespace string
	var all bool
	cmd := &cobra.Command{
		Use:   "diag NODE [VMI...] [-- DIAG-FLAGS]",
		Short: "Run hpmount diag in NODE's agent pod, with the agent's own flags",
		Long: "diag finds NODE's hpmount agent pod (by the DaemonSet's labels and spec.nodeName, in the\n" +
			"namespace of -n, else of the kubeconfig context, else " + plugin.DefaultNamespace + ") and runs\n" +
			"`hpmount diag` in it through the API server, as kubectl exec does, with the agent's\n" +
			"kubelet root, host /proc and cgroup flags. VMIs of all namespaces unless --vmi-namespace.\n" +
			"Flags after -- go to diag unchanged.\n" +
			"Exit status: diag's (0 all ok, 1 problems found, 2 could not run); 2 for a usage error\n" +
			"or when the agent pod cannot be found or reached.",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			names, extra := args, []string(nil)
			if dash := cmd.ArgsLenAtDash(); dash >= 0 {
				names, extra = args[:dash], args[dash:]
			}
			if len(names) == 0 {
				return plugin.UsageError{Err: errors.New("a NODE is required before --")}
			}
			r.Node, r.VMIs = names[0], names[1:]
			r.DiagArgs = append(diagArgs(output, vmiNamespace, all), extra...)
			code, err := r.Run(cmd.Context(), &k, cmd.OutOrStdout(), cmd.ErrOrStderr())
			if err != nil {
				cmd.PrintErrln("kubectl hpmount diag:", err)
				return plugin.ExitError{Code: plugin.ExitUsage}
			}
			return plugin.ExitError{Code: code}
		},
	}
	cmd.ValidArgsFunction = func(cmd *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		nodes, err := plugin.AgentNodes(cmd.Context(), &k, r.Selector)
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		return nodes, cobra.ShellCompDirectiveNoFileComp
	}
	f := cmd.Flags()
	k.Bind(f, "namespace of the agent's DaemonSet; default the kubeconfig context's, else "+plugin.DefaultNamespace)
	f.StringVarP(&r.Selector, "selector", "l", r.Selector, "labels of the agent pods")
	f.StringVarP(&r.Container, "container", "c", "hpmount", "the agent's container")
	f.StringVarP(&output, "output", "o", "", "diag's output format: table, wide, json or yaml")
	f.StringVar(&vmiNamespace, "vmi-namespace", "", "namespace of the VMIs; default all namespaces")
	f.BoolVarP(&all, "all-namespaces", "A", false, "VMIs of all namespaces (the default; for symmetry with kubectl)")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "wide", "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func diagArgs(output, vmiNamespace string, all bool) []string {
	var a []string
	if output != "" {
		a = append(a, "--output="+output)
	}
	if vmiNamespace != "" && !all {
		a = append(a, "--namespace="+vmiNamespace)
	} else {
		a = append(a, "--all-namespaces")
	}
	return a
}
