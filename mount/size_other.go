//go:build !linux

package mount

import (
	"fmt"
	"os"

	"github.com/hpmount/hpmount/isolation"
)

func blockDeviceSize(sysRoot string, major, minor uint32) (int64, error) {
	return 0, fmt.Errorf("block device size %d:%d: %w", major, minor, isolation.ErrUnsupported)
}

func statfsPath(path string) (FilesystemUsage, error) {
	return FilesystemUsage{}, fmt.Errorf("statfs %q: %w", path, isolation.ErrUnsupported)
}

func statfsFile(f *os.File) (FilesystemUsage, error) {
	return FilesystemUsage{}, fmt.Errorf("statfs %q: %w", f.Name(), isolation.ErrUnsupported)
}
