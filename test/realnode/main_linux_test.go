package realnode

import (
	"testing"

	"github.com/hpmount/hpmount/internal/testutil"
)

func TestMain(m *testing.M) { testutil.RunInPrivateMountNamespace(m) }
