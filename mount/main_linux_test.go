// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package mount

import (
	"testing"

	"github.com/hpmount/hpmount/internal/testutil"
)

// The root tests of this package mount loop filesystems and file binds; the
// binary re-runs itself in a private mount namespace so none of that reaches
// the machine.
func TestMain(m *testing.M) { testutil.RunInPrivateMountNamespace(m) }
