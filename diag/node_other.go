//go:build !linux

package diag

import "github.com/hpmount/hpmount/isolation"

type entry struct {
	exists bool
	kind   string
	rdev   [2]uint32
	size   int64
	nlink  uint64
}

func (in *inspector) statEntry(dirRel, name string) (entry, error) {
	return entry{}, isolation.ErrUnsupported
}

func (in *inspector) launcherDirs() ([]string, error) { return nil, isolation.ErrUnsupported }

func (in *inspector) publishedBlockPath(uid, pv string) string { return "" }

func deviceExists(sysRoot string, dev [2]uint32) bool { return false }

func openHostNamespace(hostProc string, hostPID int) (*isolation.MountNamespace, error) {
	return nil, isolation.ErrUnsupported
}
