// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"errors"

	"github.com/spf13/cobra"

	"github.com/hpmount/hpmount/cli"
)

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "kubectl-hpmount",
		Short: "hpmount's kubectl plugin: diagnose a node's hotplug volumes from anywhere",
		Annotations: map[string]string{
			cobra.CommandDisplayNameAnnotation: "kubectl hpmount",
		},
	}
	root.AddCommand(newDiagCommand(), cli.VersionCommand("kubectl-hpmount", build()))
	cli.SetVersion(root, build())
	return root
}

// newDiagCommand is `kubectl hpmount diag NODE [VMI...] [-- diag flags]`.
func newDiagCommand() *cobra.Command {
	var k cli.KubeFlags
	r := cli.RemoteDiag{Selector: cli.DefaultSelector, AgentNamespace: cli.DefaultNamespace}
	var output, vmiNamespace string
	var all bool
	cmd := &cobra.Command{
		Use:   "diag NODE [VMI...] [-- DIAG-FLAGS]",
		Short: "Run hpmount diag in NODE's agent pod, with the agent's own flags",
		Long: "diag finds NODE's hpmount agent pod (by the DaemonSet's labels and spec.nodeName, in\n" +
			"--agent-namespace, default " + cli.DefaultNamespace + ") and runs `hpmount diag` in it through\n" +
			"the API server, as kubectl exec does, with the agent's kubelet root, host /proc and cgroup\n" +
			"flags. VMIs of -n's namespace, else of the kubeconfig context's, else default, as hpmount\n" +
			"diag and kubectl choose; -A for all. Flags after -- go to diag unchanged.\n" +
			"Exit status: diag's (0 all ok, 1 problems found, 2 could not run); 2 for a usage error\n" +
			"or when the agent pod cannot be found or reached.",
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			names, extra := args, []string(nil)
			if dash := cmd.ArgsLenAtDash(); dash >= 0 {
				names, extra = args[:dash], args[dash:]
			}
			if len(names) == 0 {
				return cli.UsageError{Err: errors.New("a NODE is required before --")}
			}
			r.Node, r.VMIs = names[0], names[1:]
			if vmiNamespace != "" && k.Namespace == "" {
				k.Namespace = vmiNamespace
			}
			a, err := diagArgs(&k, output, all)
			if err != nil {
				cmd.PrintErrln("kubectl hpmount diag:", err)
				return cli.ExitError{Code: cli.ExitUsage}
			}
			r.DiagArgs = append(a, extra...)
			code, err := r.Run(cmd.Context(), &k, cmd.OutOrStdout(), cmd.ErrOrStderr())
			if err != nil {
				cmd.PrintErrln("kubectl hpmount diag:", err)
				return cli.ExitError{Code: cli.ExitUsage}
			}
			return cli.ExitError{Code: code}
		},
	}
	vmis := k.CompleteVMIs(1, &all)
	cmd.ValidArgsFunction = func(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
		if len(args) > 0 {
			return vmis(cmd, args, toComplete)
		}
		nodes, err := cli.AgentNodes(cmd.Context(), &k, r.AgentNamespace, r.Selector)
		if err != nil {
			return nil, cobra.ShellCompDirectiveError
		}
		return nodes, cobra.ShellCompDirectiveNoFileComp
	}
	f := cmd.Flags()
	k.Bind(f, "namespace of the VMIs; default the kubeconfig context's, else default")
	k.Complete(cmd)
	f.StringVar(&r.AgentNamespace, "agent-namespace", r.AgentNamespace, "namespace of the agent's DaemonSet")
	f.StringVarP(&r.Selector, "selector", "l", r.Selector, "labels of the agent pods")
	f.StringVarP(&r.Container, "container", "c", "hpmount", "the agent's container")
	f.StringVarP(&output, "output", "o", "", "diag's output format: table, wide, json or yaml")
	f.StringVar(&vmiNamespace, "vmi-namespace", "", "namespace of the VMIs (as -n)")
	_ = f.MarkDeprecated("vmi-namespace", "use -n, the VMIs' namespace as in kubectl; --agent-namespace names the agent's")
	f.BoolVarP(&all, "all-namespaces", "A", false, "VMIs of all namespaces")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions([]string{"table", "wide", "json", "yaml"}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

// diagArgs are the flags diag in the agent pod gets: the output format,
// and the VMIs' namespace as hpmount diag and kubectl choose it (-n, else
// the kubeconfig context's, else default), unless all is set. The agent
// pod has no kubeconfig of the user's, so the choice is made here.
func diagArgs(k *cli.KubeFlags, output string, all bool) ([]string, error) {
	var a []string
	if output != "" {
		a = append(a, "--output="+output)
	}
	if all {
		return append(a, "--all-namespaces"), nil
	}
	ns, err := k.ContextNamespace("default")
	if err != nil {
		return nil, err
	}
	return append(a, "--namespace="+ns), nil
}
