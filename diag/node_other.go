//go:build !linux

package diag

import (
	"errors"
)

type entry struct {
	exists bool
	kind   string
	rdev   [2]uint32
	size   int64
	nlink  uint64
	// dev and ino identify the file at the entry (a bind's source).
	dev, ino uint64
}

func (in *inspector) statEntry(dirRel, name string) (entry, error) {
	return entry{}, errors.ErrUnsupported
}

func (in *inspector) launcherDirs() ([]string, error) { return nil, errors.ErrUnsupported }

func deviceExists(sysRoot string, dev [2]uint32) bool { return false }

func devNumber(maj, min uint32) uint64 { return uint64(maj)<<32 | uint64(min) }
