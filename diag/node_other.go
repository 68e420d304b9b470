//go:build !linux

package diag

import (
	"errors"
)

func (in *inspector) statEntry(dirRel, name string) (entry, error) {
	return entry{}, errors.ErrUnsupported
}

func (in *inspector) launcherDirs() ([]string, error) { return nil, errors.ErrUnsupported }

func deviceExists(sysRoot string, dev [2]uint32) bool { return false }

func devNumber(maj, min uint32) uint64 { return uint64(maj)<<32 | uint64(min) }
