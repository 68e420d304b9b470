package node

import (
	"golang.org/x/sys/unix"

	"github.com/hpmount/hpmount/blockdev"
	"github.com/hpmount/hpmount/isolation"
	"github.com/hpmount/hpmount/propagation"
)

func devNumber(d blockdev.Device) uint64 { return unix.Mkdev(d.Major, d.Minor) }

// targetIdent is the identity of what is bound on target in hotplugDir
// (beneath the kubelet root, symlinks refused): the disk.img QEMU should
// hold. It runs in the host mount namespace.
func (e *Engine) targetIdent(hotplugDir, target string) (propagation.Ident, error) {
	root, err := isolation.OpenRoot(e.root.Path)
	if err != nil {
		return propagation.Ident{}, err
	}
	defer root.Close()
	dir, err := isolation.OpenBeneath(root, hotplugDir, isolation.How{Flags: unix.O_PATH | unix.O_DIRECTORY})
	if err != nil {
		return propagation.Ident{}, err
	}
	defer dir.Close()
	t, err := isolation.OpenBeneath(dir, target, isolation.How{Flags: unix.O_PATH})
	if err != nil {
		return propagation.Ident{}, err
	}
	defer t.Close()
	return propagation.IdentOf(t)
}
