// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package grow

import (
	"os"
	"testing"

	"github.com/hpmount/hpmount/internal/testutil"
)

// The root tests of this package mount loop filesystems and file binds; the
// binary re-runs itself in a private mount namespace so none of that reaches
// the machine. Started by TestGrowKilledMidway with growChildEnv set, it is
// instead the growth that test kills, in its parent's namespace.
func TestMain(m *testing.M) {
	if spec, ok := os.LookupEnv(growChildEnv); ok {
		os.Exit(runGrowChild(spec))
	}
	testutil.RunInPrivateMountNamespace(m)
}
