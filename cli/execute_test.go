// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/spf13/cobra"
)

// TestExecuteExitStatus holds the exit statuses both commands promise:
// 2 for what the user typed wrong, 1 for a failure (diag: problems
// found), and a command's own ExitError unchanged.
func TestExecuteExitStatus(t *testing.T) {
	tests := []struct {
		args []string
		want int
	}{
		{[]string{"ok"}, ExitOK},
		{[]string{"fail"}, ExitFailed},
		{[]string{"problems"}, ExitProblems},
		{[]string{"cannot-run"}, 2},
		{[]string{"usage"}, ExitUsage},
		{[]string{"bogus"}, ExitUsage},
		{[]string{"ok", "--bogus"}, ExitUsage},
		{[]string{"ok", "--count=x"}, ExitUsage},
		{[]string{"ok", "extra"}, ExitUsage},
		{[]string{"ok", "--help"}, ExitOK},
		{nil, ExitOK},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprint(tt.args), func(t *testing.T) {
			var out, errOut bytes.Buffer
			if got := Execute(context.Background(), testTree(), tt.args, &out, &errOut); got != tt.want {
				t.Errorf("exit %d, want %d (stderr %q)", got, tt.want, errOut.String())
			}
		})
	}
}

func testTree() *cobra.Command {
	root := &cobra.Command{Use: "t"}
	run := func(use string, err error) *cobra.Command {
		c := &cobra.Command{Use: use, Args: cobra.NoArgs, RunE: func(*cobra.Command, []string) error { return err }}
		c.Flags().Int("count", 0, "")
		return c
	}
	root.AddCommand(
		run("ok", nil),
		run("fail", errors.New("the API server said no")),
		run("problems", ExitError{Code: ExitProblems}),
		run("cannot-run", ExitError{Code: 2}),
		run("usage", UsageError{Err: errors.New("--workers 0 is below 1")}),
	)
	return root
}
