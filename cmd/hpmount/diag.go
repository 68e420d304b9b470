// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/hpmount/hpmount/cli"
	"github.com/hpmount/hpmount/diag"
)

// newDiagCommand is `hpmount diag`: a read-only explanation of every hotplug
// volume of the VMIs on this node. Exit status: 0 all ok, 1 problems found,
// 2 could not run.
func newDiagCommand() *cobra.Command {
	opts := diag.DefaultOptions()
	opts.NodeName = os.Getenv("NODE_NAME")
	var output string
	api := defaultAPIFlags()
	cmd := &cobra.Command{
		Use:   "diag [VMI...]",
		Short: "Explain the hotplug volumes of the VMIs on this node (read-only)",
		Long: "diag explains every hotplug volume of the VMIs on this node, from the VMI status down to the\n" +
			"kernel's mount table, with a verdict and a hint. It changes nothing.\n" +
			"Exit status: 0 all ok, 1 problems found, 2 could not run (a usage or flag error, too).",
		RunE: func(cmd *cobra.Command, args []string) error {
			opts.VMIs = args
			if code := runDiag(cmd, opts, api, output); code != diag.ExitOK {
				return cli.ExitError{Code: code}
			}
			return nil
		},
	}
	f := cmd.Flags()
	api.bind(f, "namespace of the VMIs; default the kubeconfig context's, else default")
	api.kube.Complete(cmd)
	cmd.ValidArgsFunction = api.kube.CompleteVMIs(0, &opts.AllNamespaces)
	f.BoolVarP(&opts.AllNamespaces, "all-namespaces", "A", false, "VMIs of all namespaces")
	f.BoolVar(&opts.AllNamespaces, "all", false, "VMIs of all namespaces (as -A)")
	f.StringVarP(&output, "output", "o", diag.FormatTable, "output format: table, wide, json or yaml")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(
		[]string{diag.FormatTable, diag.FormatWide, diag.FormatJSON, diag.FormatYAML}, cobra.ShellCompDirectiveNoFileComp))
	f.StringVar(&opts.NodeName, "node-name", opts.NodeName, "node to diagnose (default $NODE_NAME)")
	nodeFlags(f, nodeLocation{&opts.Host, &opts.KubeletRoot, &opts.CgroupRoot, &opts.CgroupMode, &opts.HandlerStateDir})
	f.StringVar(&opts.MountSource, "mount-source", opts.MountSource, "how to read the mount table: auto, findmnt or mountinfo")
	f.DurationVar(&opts.CallTimeout, "call-timeout", opts.CallTimeout, "deadline of each look at the node (a stat, an open, a /proc read, findmnt); a look past it is abandoned and its volume reported stuck, the others go on")
	return cmd
}

func runDiag(cmd *cobra.Command, opts diag.Options, api apiFlags, output string) int {
	fail := func(err error) int {
		fmt.Fprintln(cmd.ErrOrStderr(), "hpmount diag:", err)
		return diag.ExitCannotRun
	}
	switch output {
	case diag.FormatTable, diag.FormatWide, diag.FormatJSON, diag.FormatYAML:
	default:
		return fail(fmt.Errorf("output format %q: want table, wide, json or yaml", output))
	}
	if err := api.validate(); err != nil {
		return fail(err)
	}
	ns, err := api.kube.ContextNamespace("default")
	if err != nil {
		return fail(err)
	}
	opts.Namespace = ns
	kube, dyn, err := api.clients("hpmount-diag/" + build().Version)
	if err != nil {
		return fail(err)
	}
	rep, err := diag.Run(cmd.Context(), opts, diag.Clients{Kube: kube, Dyn: dyn})
	if err != nil {
		return fail(err)
	}
	if err := diag.Render(cmd.OutOrStdout(), rep, output); err != nil {
		return fail(err)
	}
	return diag.ExitCode(rep, nil)
}
