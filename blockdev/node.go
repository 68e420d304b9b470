package blockdev

import (
	"errors"
	"fmt"
	"strings"

	"github.com/hpmount/hpmount/isolation"
)

// ErrNotPublished means the kubelet has not (or no longer) published the
// volume for the attachment pod.
var ErrNotPublished = errors.New("block volume is not published for the pod")

// Result says what a node operation changed.
type Result string

const (
	Unchanged Result = "unchanged"
	Created   Result = "created"
	Replaced  Result = "replaced"
	Removed   Result = "removed"
)

// Published is the device the kubelet published for a pod's block volume.
type Published struct {
	Device Device
	// Perm is the permission of the published node, copied onto ours.
	Perm uint32
}

// Node is a block device node found in a hotplug-disks directory.
type Node struct {
	Name   string
	Device Device
}

// Nodes manages block device nodes in launchers' hotplug-disks directories.
// Every syscall runs in NS, beneath KubeletRoot, on file descriptors.
type Nodes struct {
	NS          *isolation.MountNamespace
	KubeletRoot string
	UID, GID    int
}

// ValidName refuses a volume name that is not one plain file name. The
// names come from the VMI, which a tenant writes.
func ValidName(name string) error {
	switch {
	case name == "", name == ".", name == "..":
		return fmt.Errorf("volume name %q: %w: empty or a dot name", name, isolation.ErrUnsafePath)
	case strings.ContainsAny(name, "/\x00"):
		return fmt.Errorf("volume name %q: %w: contains / or NUL", name, isolation.ErrUnsafePath)
	case len(name) > 200:
		return fmt.Errorf("volume name %q: %w: longer than 200 bytes", name, isolation.ErrUnsafePath)
	}
	return nil
}
