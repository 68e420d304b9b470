//go:build !linux

package mount

import (
	"fmt"

	"github.com/hpmount/hpmount/isolation"
)

// LauncherDirs is only supported on Linux.
func LauncherDirs(kubeletRoot string) ([]LauncherDir, error) {
	return nil, fmt.Errorf("list launchers under %q: %w", kubeletRoot, isolation.ErrUnsupported)
}
