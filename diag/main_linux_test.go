// Copyright The hpmount Authors.
// SPDX-License-Identifier: Apache-2.0

package diag

import (
	"testing"

	"github.com/hpmount/hpmount/internal/testutil"
)

func TestMain(m *testing.M) { testutil.RunInPrivateMountNamespace(m) }
