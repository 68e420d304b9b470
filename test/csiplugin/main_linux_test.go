// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package csiplugin

import (
	"testing"

	"github.com/hpmount/hpmount/internal/testutil"
)

// The root tests stage and publish real loop filesystems; the binary re-runs
// itself in a private mount namespace so none of it reaches the machine.
func TestMain(m *testing.M) { testutil.RunInPrivateMountNamespace(m) }
