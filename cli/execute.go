// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"
)

// Exit statuses of both commands. ExitProblems is diag's "problems found";
// ExitUsage is a usage or flag error: 2, as grep, diff and the shells'
// builtins use it (kubectl exits 1 there, which diag keeps for problems
// found).
const (
	ExitOK       = 0
	ExitFailed   = 1
	ExitProblems = 1
	ExitUsage    = 2
)

// ExitError ends a command with Code and no message: the command has
// already said what it had to (diag's report, a remote command's output).
type ExitError struct{ Code int }

func (e ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// UsageError is an error in what the user asked: a flag value that does not
// validate, a wrong number of arguments. It exits ExitUsage.
type UsageError struct{ Err error }

func (e UsageError) Error() string { return e.Err.Error() }
func (e UsageError) Unwrap() error { return e.Err }

// Execute runs root with args and returns the exit status: ExitError's
// code; ExitUsage for an error before a command's RunE started (unknown
// command or flag, bad arguments, a flag that does not parse) or a
// UsageError; ExitFailed for any other error of RunE.
func Execute(ctx context.Context, root *cobra.Command, args []string, stdout, stderr io.Writer) int {
	ran := false
	markRun(root, &ran)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SilenceErrors, root.SilenceUsage = true, true
	cmd, err := root.ExecuteContextC(ctx)
	var exit ExitError
	var usage UsageError
	switch {
	case err == nil:
		return ExitOK
	case errors.As(err, &exit):
		return exit.Code
	case !ran || errors.As(err, &usage):
		fmt.Fprintf(stderr, "%s: %v\nSee '%s --help'.\n", root.Name(), err, cmd.CommandPath())
		return ExitUsage
	default:
		fmt.Fprintf(stderr, "%s: %v\n", root.Name(), err)
		return ExitFailed
	}
}

// markRun wraps every RunE of the tree to set *ran: cobra reports flag,
// argument and unknown-command errors before RunE, with no type to tell
// them from RunE's own errors.
func markRun(c *cobra.Command, ran *bool) {
	if run := c.RunE; run != nil {
		c.RunE = func(cmd *cobra.Command, args []string) error {
			*ran = true
			return run(cmd, args)
		}
	}
	for _, sub := range c.Commands() {
		markRun(sub, ran)
	}
}
