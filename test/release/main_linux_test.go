// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package release

import (
	"testing"

	"github.com/hpmount/hpmount/internal/testutil"
)

// The image test runs runc, which mounts; the test binary runs in a
// private mount namespace so none of it reaches the machine.
func TestMain(m *testing.M) { testutil.RunInPrivateMountNamespace(m) }
